// Per-CTA shared counters (atomicAdd / atomicMax on shared), then one global atomic each.
extern "C" __global__ void atomic_shared(const int* a, int* sum, int* mx)
{
    __shared__ int s[2];
    int t = threadIdx.x;
    if (t == 0) {
        s[0] = 0;
        s[1] = -1000;
    }
    __syncthreads();
    int v = a[blockIdx.x * blockDim.x + t];
    atomicAdd(&s[0], v);
    atomicMax(&s[1], v);
    __syncthreads();
    if (t == 0) {
        atomicAdd(sum, s[0]);
        atomicMax(mx, s[1]);
    }
}
