// Shared-memory tree max reduction of signed values (negatives included).
extern "C" __global__ void reduce_max(const int* a, int* out)
{
    __shared__ int s[8];
    int t = threadIdx.x;
    s[t] = a[blockIdx.x * 8 + t];
    __syncthreads();
#pragma unroll 1
    for (int k = 4; k > 0; k >>= 1) {
        if (t < k) s[t] = max(s[t], s[t + k]);
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
