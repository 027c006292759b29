// High 32 bits of the 64-bit product, unsigned and signed.
extern "C" __global__ void mulhi(const unsigned* a, const unsigned* b, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i];
    out[2 * i + 0] = __umulhi(x, y);
    out[2 * i + 1] = (unsigned)__mulhi((int)x, (int)y);
}
