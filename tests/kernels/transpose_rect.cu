// Transpose a h x w matrix (global memory only, 2-D grid of 2-D blocks, bounds check).
extern "C" __global__ void transpose_rect(const int* in, int* out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[x * h + y] = in[y * w + x];
}
