// y = M x for a rows x cols matrix, one row per thread across 2 CTAs.
extern "C" __global__ void matvec(const int* M, const int* x, int* y, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int s = 0;
#pragma unroll 1
    for (int c = 0; c < cols; ++c) s += M[r * cols + c] * x[c];
    y[r] = s;
}
