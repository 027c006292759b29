// One barrier between a shared store and a neighbour's load: thread t reads t+1's value.
extern "C" __global__ void shared_rotate(const int* a, int* out)
{
    __shared__ int s[4];
    int t = threadIdx.x;
    s[t] = a[t] * 3;
    __syncthreads();
    out[t] = s[(t + 1) & 3] - t;
}
