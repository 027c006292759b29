// Shuffles with width 2: pairs of lanes swap, and down / up stay inside their pair.
extern "C" __global__ void shfl_width2(const int* a, int* out)
{
    int t = threadIdx.x;
    int v = a[t];
    out[3 * t + 0] = __shfl_xor_sync(0xffffffffu, v, 1, 2);
    out[3 * t + 1] = __shfl_down_sync(0xffffffffu, v, 1, 2);
    out[3 * t + 2] = __shfl_up_sync(0xffffffffu, v, 1, 2);
}
