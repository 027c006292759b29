// The dot product of two int vectors: one thread per element, one atomic sum.
extern "C" __global__ void dot(const int* a, const int* b, int* out, int n)
{
    int i = threadIdx.x;
    if (i < n)
        atomicAdd(out, a[i] * b[i]);
}
