// In-place reversal of n elements: thread i < n/2 swaps a[i] and a[n-1-i].
extern "C" __global__ void reverse_inplace(int* a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 2) {
        int j = n - 1 - i;
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
