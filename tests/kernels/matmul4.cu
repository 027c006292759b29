// C = A * B for 4x4 matrices with a rolled inner loop (4x4 block).
extern "C" __global__ void matmul4(const int* A, const int* B, int* C)
{
    int r = threadIdx.y, c = threadIdx.x;
    int s = 0;
#pragma unroll 1
    for (int k = 0; k < 4; ++k) s += A[r * 4 + k] * B[k * 4 + c];
    C[r * 4 + c] = s;
}
