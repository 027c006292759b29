// One 4-thread warp: up/down by 1..3 at the warp edges (out-of-range lanes keep their own
// value) and a rotation with idx.
extern "C" __global__ void shfl_edges(const int* a, int* out)
{
    int t = threadIdx.x;
    int v = a[blockIdx.x * 4 + t];
    int o = blockIdx.x * 16 + 4 * t;
    out[o + 0] = __shfl_up_sync(0xffffffffu, v, 3);
    out[o + 1] = __shfl_down_sync(0xffffffffu, v, 3, 4);
    out[o + 2] = __shfl_up_sync(0xffffffffu, v, 1);
    out[o + 3] = __shfl_sync(0xffffffffu, v, (t + 1) & 3);
}
