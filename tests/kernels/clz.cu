// __clz (32 for zero) and the bit length 32 - clz.
extern "C" __global__ void clz(const unsigned* a, int* out)
{
    int i = threadIdx.x;
    int z = __clz((int)a[i]);
    out[2 * i + 0] = z;
    out[2 * i + 1] = 32 - z;
}
