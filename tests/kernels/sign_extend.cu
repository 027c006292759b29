// Sign-extend the low 8 and 12 bits of each word with shift pairs.
extern "C" __global__ void sign_extend(const unsigned* a, int* out)
{
    int i = threadIdx.x;
    unsigned x = a[i];
    out[2 * i + 0] = (int)(x << 24) >> 24;
    out[2 * i + 1] = (int)(x << 20) >> 20;
}
