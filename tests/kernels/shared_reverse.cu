// Reverse each CTA's 8-element chunk through a static shared array.
extern "C" __global__ void shared_reverse(const int* a, int* out)
{
    __shared__ int s[8];
    int t = threadIdx.x;
    int base = blockIdx.x * 8;
    s[t] = a[base + t];
    __syncthreads();
    out[base + t] = s[7 - t];
}
