// 1-D 3-point stencil over n elements with clamped boundaries, several CTAs.
extern "C" __global__ void stencil_1d(const int* a, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int l = i > 0 ? a[i - 1] : a[0];
    int r = i < n - 1 ? a[i + 1] : a[n - 1];
    out[i] = l + 2 * a[i] + r;
}
