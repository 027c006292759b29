// Inclusive scan inside each 4-lane segment with __shfl_up_sync (width 4).
extern "C" __global__ void shfl_up(const int* a, int* out)
{
    int t = threadIdx.x;
    int v = a[t];
    int n = __shfl_up_sync(0xffffffffu, v, 1, 4);
    if ((t & 3) >= 1) v += n;
    n = __shfl_up_sync(0xffffffffu, v, 2, 4);
    if ((t & 3) >= 2) v += n;
    out[t] = v;
}
