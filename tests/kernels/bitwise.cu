// and / or / xor / not.
extern "C" __global__ void bitwise(const unsigned* a, const unsigned* b, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i];
    out[4 * i + 0] = x & y;
    out[4 * i + 1] = x | ~y;
    out[4 * i + 2] = x ^ y;
    out[4 * i + 3] = ~x;
}
