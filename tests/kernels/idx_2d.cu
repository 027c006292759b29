// 2-D block in a 2-D grid: row-major global coordinates.
extern "C" __global__ void idx_2d(int* out)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int w = gridDim.x * blockDim.x;
    out[y * w + x] = (blockIdx.y << 12) | (blockIdx.x << 8) | (threadIdx.y << 4) | threadIdx.x;
}
