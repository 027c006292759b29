// Gray code and its inverse (prefix xor by a shift loop).
extern "C" __global__ void gray_code(const unsigned* a, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i];
    unsigned g = x ^ (x >> 1);
    unsigned b = g;
#pragma unroll 1
    for (unsigned s = 1u; s < 32u; s <<= 1) b ^= b >> s;
    out[2 * i + 0] = g;
    out[2 * i + 1] = b;
}
