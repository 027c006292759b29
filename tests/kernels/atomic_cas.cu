// Lock-free add through an atomicCAS retry loop, and a CAS claim only one thread wins.
extern "C" __global__ void atomic_cas(const int* a, int* sum, int* claim, int* wins)
{
    int v = a[threadIdx.x];
    int old = *sum;
    int assumed;
#pragma unroll 1
    do {
        assumed = old;
        old = atomicCAS(sum, assumed, assumed + v);
    } while (old != assumed);
    if (atomicCAS(claim, 0, 7) == 0) atomicAdd(wins, 1);
}
