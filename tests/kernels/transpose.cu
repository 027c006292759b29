// 4x4 transpose through a 2-D shared tile with a 2-D block.
extern "C" __global__ void transpose(const int* in, int* out)
{
    __shared__ int tile[4][4];
    int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = in[y * 4 + x];
    __syncthreads();
    out[y * 4 + x] = tile[x][y];
}
