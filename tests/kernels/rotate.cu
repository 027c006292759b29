// Rotate left by 1..31 written with shifts and or (the compiler may use a funnel shift).
extern "C" __global__ void rotate(const unsigned* a, const unsigned* s, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], k = s[i];
    out[i] = (x << k) | (x >> (32u - k));
}
