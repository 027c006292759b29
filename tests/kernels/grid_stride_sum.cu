// Grid-stride partial sums, combined with one atomicAdd per thread.
extern "C" __global__ void grid_stride_sum(const int* a, int* total, int n)
{
    int s = 0;
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        s += a[i];
    atomicAdd(total, s);
}
