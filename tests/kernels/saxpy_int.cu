// y = a * x + y (integer saxpy), several CTAs, tail threads return early.
extern "C" __global__ void saxpy_int(int n, int a, const int* x, int* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
