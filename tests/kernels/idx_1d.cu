// 1-D ids: each thread writes its blockIdx, threadIdx, blockDim and gridDim.
extern "C" __global__ void idx_1d(int* out)
{
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    out[g] = (gridDim.x << 24) | (blockDim.x << 16) | (blockIdx.x << 8) | threadIdx.x;
}
