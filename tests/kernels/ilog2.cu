// floor(log2 x) and the next power of two (x >= 1) from __clz.
extern "C" __global__ void ilog2(const unsigned* a, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i];
    int l = 31 - __clz((int)x);
    out[2 * i + 0] = (unsigned)l;
    out[2 * i + 1] = x <= 1u ? 1u : (2u << (31 - __clz((int)(x - 1u))));
}
