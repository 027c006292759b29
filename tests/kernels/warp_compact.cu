// Stream compaction inside a 4-thread warp: rank = popc(ballot & lanes below me).
extern "C" __global__ void warp_compact(const int* a, int* out, int* count)
{
    int t = threadIdx.x;
    int x = a[blockIdx.x * 4 + t];
    bool keep = (x & 1) == 0;
    unsigned b = __ballot_sync(0xffffffffu, keep);
    int rank = __popc(b & ((1u << t) - 1u));
    if (keep) out[blockIdx.x * 4 + rank] = x;
    if (t == 0) count[blockIdx.x] = __popc(b);
}
