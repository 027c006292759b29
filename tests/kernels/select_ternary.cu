// Ternaries: absolute difference and a sign flip chosen by the low bit.
extern "C" __global__ void select_ternary(const int* a, const int* b, int* out)
{
    int i = threadIdx.x;
    int x = a[i], y = b[i];
    out[2 * i + 0] = x > y ? x - y : y - x;
    out[2 * i + 1] = (x & 1) ? y : -y;
}
