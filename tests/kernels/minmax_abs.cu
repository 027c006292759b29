// Signed and unsigned min / max, and abs.
extern "C" __global__ void minmax_abs(const int* a, const int* b, int* out)
{
    int i = threadIdx.x;
    int x = a[i], y = b[i];
    out[5 * i + 0] = min(x, y);
    out[5 * i + 1] = max(x, y);
    out[5 * i + 2] = (int)umin((unsigned)x, (unsigned)y);
    out[5 * i + 3] = (int)umax((unsigned)x, (unsigned)y);
    out[5 * i + 4] = abs(x);
}
