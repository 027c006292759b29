// Unsigned division and remainder by constants (10 and 3).
extern "C" __global__ void div_const_u(const unsigned* a, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i];
    out[3 * i + 0] = x / 10u;
    out[3 * i + 1] = x % 10u;
    out[3 * i + 2] = x / 3u;
}
