// __shfl_sync (indexed) with width 4: a constant source lane, and per-lane sources that
// are taken modulo the width.
extern "C" __global__ void shfl_idx(const int* a, const int* src, int* out)
{
    int t = threadIdx.x;
    int v = a[t];
    out[2 * t + 0] = __shfl_sync(0xffffffffu, v, 2, 4);
    out[2 * t + 1] = __shfl_sync(0xffffffffu, v, src[t], 4);
}
