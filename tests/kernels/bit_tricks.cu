// Lowest set bit, clear lowest set bit, power-of-two test, parity of the Gray code.
extern "C" __global__ void bit_tricks(const unsigned* a, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i];
    out[4 * i + 0] = x & (0u - x);
    out[4 * i + 1] = x & (x - 1u);
    out[4 * i + 2] = (x != 0u && (x & (x - 1u)) == 0u) ? 1u : 0u;
    out[4 * i + 3] = __popc(x ^ (x >> 1)) & 1;
}
