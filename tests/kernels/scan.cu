// Hillis-Steele inclusive prefix sum over 16 elements in shared memory.
extern "C" __global__ void scan(const int* a, int* out)
{
    __shared__ int s[16];
    int t = threadIdx.x;
    s[t] = a[t];
    __syncthreads();
#pragma unroll 1
    for (int off = 1; off < 16; off <<= 1) {
        int v = t >= off ? s[t - off] : 0;
        __syncthreads();
        s[t] += v;
        __syncthreads();
    }
    out[t] = s[t];
}
