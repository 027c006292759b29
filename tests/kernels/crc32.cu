// Bitwise CRC-32 (reflected, polynomial 0xEDB88320) of one 32-bit word per thread.
extern "C" __global__ void crc32(const unsigned* a, unsigned* out)
{
    int i = threadIdx.x;
    unsigned c = 0xffffffffu ^ a[i];
#pragma unroll 1
    for (int k = 0; k < 32; ++k) c = (c >> 1) ^ ((c & 1u) ? 0xedb88320u : 0u);
    out[i] = ~c;
}
