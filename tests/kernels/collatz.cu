// Collatz steps to reach 1 (divergent while loop).
extern "C" __global__ void collatz(const unsigned* a, int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = a[i];
    int steps = 0;
#pragma unroll 1
    while (x != 1u) {
        x = (x & 1u) ? 3u * x + 1u : x >> 1;
        ++steps;
    }
    out[i] = steps;
}
