// Variable shifts in [0, 31]: left, logical right, arithmetic right.
extern "C" __global__ void shifts(const unsigned* a, const unsigned* s, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], k = s[i] & 31u;
    out[3 * i + 0] = x << k;
    out[3 * i + 1] = x >> k;
    out[3 * i + 2] = (unsigned)((int)x >> k);
}
