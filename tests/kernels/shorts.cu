// 16-bit loads at both halves of a word: unsigned zero-extends, signed sign-extends.
extern "C" __global__ void shorts(const int* packed, int* out)
{
    const unsigned short* u = (const unsigned short*)packed;
    const short* s = (const short*)packed;
    int i = threadIdx.x;
    out[2 * i + 0] = u[i];
    out[2 * i + 1] = s[7 - i];
}
