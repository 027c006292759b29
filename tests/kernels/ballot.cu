// __ballot_sync in 4-thread CTAs: the mask of lanes with a positive value, and its popcount.
extern "C" __global__ void ballot(const int* a, unsigned* out)
{
    int t = threadIdx.x;
    int i = blockIdx.x * 4 + t;
    unsigned b = __ballot_sync(0xffffffffu, a[i] > 0);
    out[2 * i + 0] = b;
    out[2 * i + 1] = __popc(b);
}
