// Both arms of a divergent if/else write shared memory; after the barrier each thread
// reads the value written by the thread mirrored across the block.
extern "C" __global__ void sync_ifelse(const int* a, int* out)
{
    __shared__ int s[16];
    int t = threadIdx.x;
    int x = a[t];
    if (x > t) {
        s[t] = x - t;
    } else {
        s[t] = (t - x) * 2 + 1;
    }
    __syncthreads();
    out[t] = s[15 - t];
}
