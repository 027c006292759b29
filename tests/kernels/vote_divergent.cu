// Votes after divergent, data-dependent loops (the warp reconverges first).
extern "C" __global__ void vote_divergent(const int* a, int* out)
{
    int t = threadIdx.x;
    int x = a[blockIdx.x * 4 + t];
    int s = 0;
#pragma unroll 1
    for (int k = 0; k < (x & 7); ++k) s += k;
    unsigned b = __ballot_sync(0xffffffffu, s > 6);
    int all = __all_sync(0xffffffffu, s < 15);
    out[blockIdx.x * 4 + t] = (int)(b << 8) | (all << 5) | s;
}
