// __any_sync / __all_sync in 4-thread CTAs.
extern "C" __global__ void any_all(const int* a, int* out)
{
    int i = blockIdx.x * 4 + threadIdx.x;
    int x = a[i];
    int any = __any_sync(0xffffffffu, x > 5);
    int all = __all_sync(0xffffffffu, x > 0);
    out[i] = (any ? 1 : 0) | (all ? 2 : 0);
}
