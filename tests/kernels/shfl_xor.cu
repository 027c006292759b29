// Butterfly all-reduce (max and sum) inside each 4-lane segment with __shfl_xor_sync.
extern "C" __global__ void shfl_xor(const int* a, int* out)
{
    int t = threadIdx.x;
    int m = a[t], s = m;
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 1, 4));
    s += __shfl_xor_sync(0xffffffffu, s, 1, 4);
    m = max(m, __shfl_xor_sync(0xffffffffu, m, 2, 4));
    s += __shfl_xor_sync(0xffffffffu, s, 2, 4);
    out[2 * t + 0] = m;
    out[2 * t + 1] = s;
}
