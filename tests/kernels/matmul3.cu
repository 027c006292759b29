// C = A * B for 3x3 matrices, one thread per output element (3x3 block).
extern "C" __global__ void matmul3(const int* A, const int* B, int* C)
{
    int r = threadIdx.y, c = threadIdx.x;
    int s = 0;
    for (int k = 0; k < 3; ++k) s += A[r * 3 + k] * B[k * 3 + c];
    C[r * 3 + c] = s;
}
