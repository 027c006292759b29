// __shfl_down_sync with width 4: lanes whose source falls past their 4-lane segment keep
// their own value, so lane 0 of each segment ends with the segment sum.
extern "C" __global__ void shfl_down(const int* a, int* out)
{
    int t = threadIdx.x;
    int v = a[t];
    v += __shfl_down_sync(0xffffffffu, v, 2, 4);
    v += __shfl_down_sync(0xffffffffu, v, 1, 4);
    out[t] = v;
}
