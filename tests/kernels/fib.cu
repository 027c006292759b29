// Fibonacci numbers modulo 2^32 (fib(48) and up wrap), per-lane trip count.
extern "C" __global__ void fib(const int* n, unsigned* out)
{
    int i = threadIdx.x;
    unsigned f0 = 0u, f1 = 1u;
    int k = n[i];
#pragma unroll 1
    for (int j = 0; j < k; ++j) {
        unsigned t = f0 + f1;
        f0 = f1;
        f1 = t;
    }
    out[i] = f0;
}
