// Some lanes return before a loop; the rest run a loop whose trip count comes from a scalar.
extern "C" __global__ void early_exit_loop(const int* a, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int x = a[i];
    if (x < 0) return;
    int s = x;
#pragma unroll 1
    for (int k = 0; k < n; ++k) s = s * 2 + k;
    out[i] = s;
}
