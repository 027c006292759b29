// All threads stage 8 values in shared memory; thread 0 bubble-sorts them; all write back.
extern "C" __global__ void bubble_sort(const int* a, int* out)
{
    __shared__ int s[8];
    int t = threadIdx.x;
    s[t] = a[t];
    __syncthreads();
    if (t == 0) {
#pragma unroll 1
        for (int i = 7; i > 0; --i) {
#pragma unroll 1
            for (int j = 0; j < i; ++j) {
                int x = s[j], y = s[j + 1];
                if (x > y) {
                    s[j] = y;
                    s[j + 1] = x;
                }
            }
        }
    }
    __syncthreads();
    out[t] = s[t];
}
