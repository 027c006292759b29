// Lower bound of each key in a sorted array of n ints (data-dependent loop with loads).
extern "C" __global__ void binary_search(const int* sorted, int n, const int* keys, int* out)
{
    int i = threadIdx.x;
    int key = keys[i];
    int lo = 0, hi = n;
#pragma unroll 1
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (sorted[mid] < key) lo = mid + 1; else hi = mid;
    }
    out[i] = lo;
}
