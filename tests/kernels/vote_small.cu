// __ballot_sync, __any_sync and __all_sync in one 4-thread CTA, packed into one word.
extern "C" __global__ void vote_small(const int* a, unsigned* out)
{
    int t = threadIdx.x;
    int x = a[t];
    unsigned mask = __ballot_sync(0xffffffffu, x > 0);
    int any = __any_sync(0xffffffffu, x > 5);
    int all = __all_sync(0xffffffffu, x != 0);
    out[t] = mask | (any << 4) | (all << 5);
}
