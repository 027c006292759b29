// Total population count of an array with a grid-stride loop and a shared partial.
extern "C" __global__ void popcount_array(const unsigned* a, int* total, int n)
{
    __shared__ int part;
    if (threadIdx.x == 0) part = 0;
    __syncthreads();
    int c = 0;
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        c += __popc(a[i]);
    atomicAdd(&part, c);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(total, part);
}
