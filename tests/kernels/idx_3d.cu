// 3-D block in a 3-D grid: the linear slot of each thread records its raw ids.
extern "C" __global__ void idx_3d(int* out)
{
    int cta = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int n = blockDim.x * blockDim.y * blockDim.z;
    out[cta * n + t] = (((blockIdx.z * 4 + blockIdx.y) * 4 + blockIdx.x) * 16 + threadIdx.z) * 256
                     + threadIdx.y * 16 + threadIdx.x;
}
