// Parallel dot product: per-thread grid-stride partial products combined by atomicAdd.
extern "C" __global__ void dot_atomic(const int* a, const int* b, int* out, int n)
{
    int s = 0;
#pragma unroll 1
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        s += a[i] * b[i];
    atomicAdd(out, s);
}
