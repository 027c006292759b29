// __ffs: 1-based index of the lowest set bit, 0 for zero.
extern "C" __global__ void ffs(const int* a, int* out)
{
    int i = threadIdx.x;
    out[i] = __ffs(a[i]);
}
