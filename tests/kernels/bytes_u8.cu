// Unsigned byte loads from a byte buffer packed little-endian into 32-bit words.
extern "C" __global__ void bytes_u8(const int* packed, int* out)
{
    const unsigned char* p = (const unsigned char*)packed;
    int i = threadIdx.x;
    out[i] = p[2 * i] + 3 * p[2 * i + 1];
}
