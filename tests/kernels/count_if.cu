// Count the elements in [lo, hi] with one atomicAdd per matching thread (2 CTAs).
extern "C" __global__ void count_if(const int* a, int* count, int lo, int hi)
{
    int x = a[blockIdx.x * blockDim.x + threadIdx.x];
    if (x >= lo && x <= hi) atomicAdd(count, 1);
}
