// Sum of absolute differences of two 8-element rows per thread pair of vectors.
extern "C" __global__ void sad(const int* a, const int* b, int* out)
{
    int i = threadIdx.x;
    int s = 0;
#pragma unroll 1
    for (int k = 0; k < 4; ++k) s += abs(a[4 * i + k] - b[4 * i + k]);
    out[i] = s;
}
