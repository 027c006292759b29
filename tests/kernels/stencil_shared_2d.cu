// 2-D 5-point stencil on a 4x4 shared tile (missing neighbours count as zero).
extern "C" __global__ void stencil_shared_2d(const int* in, int* out)
{
    __shared__ int tile[4][4];
    int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = in[y * 4 + x];
    __syncthreads();
    int s = 4 * tile[y][x];
    if (x > 0) s -= tile[y][x - 1];
    if (x < 3) s -= tile[y][x + 1];
    if (y > 0) s -= tile[y - 1][x];
    if (y < 3) s -= tile[y + 1][x];
    out[y * 4 + x] = s;
}
