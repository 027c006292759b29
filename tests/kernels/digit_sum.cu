// Decimal digit sum and digit count of |x|: a loop of signed division by the constant 10.
extern "C" __global__ void digit_sum(const int* a, int* out)
{
    int i = threadIdx.x;
    int x = a[i];
    if (x < 0) x = -x;
    int s = 0, d = 0;
#pragma unroll 1
    do {
        s += x % 10;
        x /= 10;
        ++d;
    } while (x != 0);
    out[2 * i + 0] = s;
    out[2 * i + 1] = d;
}
