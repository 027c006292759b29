// Divergent loops of different lengths reconverge before __syncthreads; then every
// thread reads its neighbour's shared slot.
extern "C" __global__ void reconverge_sync(const int* a, int* out)
{
    __shared__ int s[12];
    int t = threadIdx.x;
    int v = a[t];
    int acc = 0;
#pragma unroll 1
    for (int k = 0; k < (t & 3) + 1; ++k) acc = acc * 3 + v;
    if (t & 1) acc = -acc;
    s[t] = acc;
    __syncthreads();
    out[t] = s[(t + 1) % 12] - s[t];
}
