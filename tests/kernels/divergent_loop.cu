// Each lane runs its own trip count; the warp reconverges after the loop.
extern "C" __global__ void divergent_loop(const int* trips, int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n = trips[i];
    int s = 0;
#pragma unroll 1
    for (int k = 0; k < n; ++k) s += k ^ i;
    out[i] = s;
}
