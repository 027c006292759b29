// Odd-even transposition sort of 8 values in shared memory (8 phases, barrier each).
extern "C" __global__ void odd_even_sort(const int* a, int* out)
{
    __shared__ int s[8];
    int t = threadIdx.x;
    s[t] = a[t];
    __syncthreads();
#pragma unroll 1
    for (int p = 0; p < 8; ++p) {
        if ((t & 1) == (p & 1) && t < 7) {
            int x = s[t], y = s[t + 1];
            if (x > y) {
                s[t] = y;
                s[t + 1] = x;
            }
        }
        __syncthreads();
    }
    out[t] = s[t];
}
