// The same bits compared as signed and as unsigned: -1 < 1 signed, but not unsigned.
extern "C" __global__ void cmp_signed_unsigned(const int* a, const int* b, int* out)
{
    int i = threadIdx.x;
    int x = a[i], y = b[i];
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    out[4 * i + 0] = x < y;
    out[4 * i + 1] = ux < uy;
    out[4 * i + 2] = x <= y ? 10 : 20;
    out[4 * i + 3] = ux >= uy ? x : y;
}
