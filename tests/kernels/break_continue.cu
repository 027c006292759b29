// continue skips odd values, break stops once the running sum exceeds a limit.
extern "C" __global__ void break_continue(const int* a, int* out, int limit)
{
    int i = threadIdx.x;
    int s = 0;
#pragma unroll 1
    for (int k = 0; k < 16; ++k) {
        int v = a[(i + k) & 15];
        if (v & 1) continue;
        s += v;
        if (s > limit) break;
    }
    out[i] = s;
}
