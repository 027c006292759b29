// __popc per element, and the total through one atomicAdd per thread.
extern "C" __global__ void popc(const unsigned* a, int* out, int* total)
{
    int i = threadIdx.x;
    int c = __popc(a[i]);
    out[i] = c;
    atomicAdd(total, c);
}
