// Arg-max over several CTAs: atomicMax of (value << 8 | index) is order independent.
extern "C" __global__ void argmax_atomic(const int* a, unsigned* best)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicMax(best, ((unsigned)a[i] << 8) | (unsigned)i);
}
