// Grid-stride loop: each thread handles i, i + stride, ... below n.
extern "C" __global__ void grid_stride(const int* a, int* out, int n)
{
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        out[i] = a[i] * 3 - i;
}
