// Signed byte loads sign-extend: bytes >= 0x80 are negative.
extern "C" __global__ void bytes_s8(const int* packed, int* out)
{
    const signed char* p = (const signed char*)packed;
    int i = threadIdx.x;
    out[i] = p[3 * i + 1] - 2 * p[i];
}
