// Tree reduction in shared memory with __syncthreads between levels; one sum per CTA.
extern "C" __global__ void reduce_sum(const int* a, int* out)
{
    __shared__ int s[16];
    int t = threadIdx.x;
    s[t] = a[blockIdx.x * 16 + t];
    __syncthreads();
#pragma unroll 1
    for (int k = 8; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
