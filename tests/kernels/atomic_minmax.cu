// Signed and unsigned atomicMin / atomicMax over one value per thread.
extern "C" __global__ void atomic_minmax(const int* a, int* smin, int* smax, unsigned* umn,
                                         unsigned* umx)
{
    int v = a[blockIdx.x * blockDim.x + threadIdx.x];
    atomicMin(smin, v);
    atomicMax(smax, v);
    atomicMin(umn, (unsigned)v);
    atomicMax(umx, (unsigned)v);
}
