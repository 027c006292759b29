// c = a + b over n elements; the grid has more threads than n (early return).
extern "C" __global__ void vec_add(const int* a, const int* b, int* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    c[i] = a[i] + b[i];
}
