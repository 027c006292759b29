// Shifts by constants, including the extremes 1 and 31.
extern "C" __global__ void shift_const(const int* a, int* out)
{
    int i = threadIdx.x;
    int x = a[i];
    unsigned u = (unsigned)x;
    out[4 * i + 0] = (int)(u << 31) | (int)(u >> 31);
    out[4 * i + 1] = x >> 31;
    out[4 * i + 2] = x >> 3;
    out[4 * i + 3] = (int)((u >> 1) ^ (u << 7));
}
