// Every thread of every CTA adds to the same two words.
extern "C" __global__ void atomic_contention(int* out)
{
    atomicAdd(&out[0], (int)threadIdx.x + 1);
    atomicAdd(&out[1], 1);
}
