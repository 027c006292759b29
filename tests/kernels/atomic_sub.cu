// atomicSub from a signed counter and from an unsigned one that wraps below zero.
extern "C" __global__ void atomic_sub(const int* a, int* acc, unsigned* wrap)
{
    int i = threadIdx.x;
    atomicSub(acc, a[i]);
    atomicSub(wrap, (unsigned)i + 1u);
}
