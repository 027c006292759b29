// Short conditionals the compiler turns into predicated code, and a predicated store.
extern "C" __global__ void predicated(const int* a, int* out)
{
    int i = threadIdx.x;
    int x = a[i];
    int y;
    if (x & 1) y = 3 * x + 1; else y = x >> 1;
    if (y > 10) y -= 10;
    out[i] = y;
    if (x < 0) out[i + 8] = x;
}
