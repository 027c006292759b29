// Unsigned subtraction and multiplication: every result wraps modulo 2^32.
extern "C" __global__ void sub_mul_wrap(const unsigned* a, const unsigned* b, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i];
    out[3 * i + 0] = x - y;
    out[3 * i + 1] = x * y;
    out[3 * i + 2] = x * y + x - (y << 3);
}
