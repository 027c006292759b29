// Signed division and remainder by constants (the compiler uses mul.hi / shift sequences).
extern "C" __global__ void div_const(const int* a, int* out)
{
    int i = threadIdx.x;
    int x = a[i];
    out[5 * i + 0] = x / 7;
    out[5 * i + 1] = x % 7;
    out[5 * i + 2] = x / -3;
    out[5 * i + 3] = x / 16;
    out[5 * i + 4] = x % 16;
}
