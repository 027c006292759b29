// memset-style fill of out[0..n) with value + i, grid-stride.
extern "C" __global__ void fill(int* out, int n, int value)
{
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        out[i] = value + i;
}
