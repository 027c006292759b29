// 8-bin histogram in shared memory, merged into the global histogram per CTA.
extern "C" __global__ void shared_hist(const unsigned* a, int* hist)
{
    __shared__ int s[8];
    int t = threadIdx.x;
    if (t < 8) s[t] = 0;
    __syncthreads();
    atomicAdd(&s[a[blockIdx.x * 16 + t] >> 29], 1);
    __syncthreads();
    if (t < 8) atomicAdd(&hist[t], s[t]);
}
