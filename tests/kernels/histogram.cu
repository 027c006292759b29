// Global 8-bin histogram of a[i] & 7 with atomicAdd, several CTAs.
extern "C" __global__ void histogram(const int* a, int* hist, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&hist[a[i] & 7], 1);
}
