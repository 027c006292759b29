// A loop with the same trip count in every lane.
extern "C" __global__ void uniform_loop(int* out, int n)
{
    int i = threadIdx.x;
    int s = 0;
#pragma unroll 1
    for (int k = 0; k < n; ++k) s += k * i + 1;
    out[i] = s;
}
