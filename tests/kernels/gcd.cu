// Euclid's gcd with a runtime remainder in the loop.
extern "C" __global__ void gcd(const unsigned* a, const unsigned* b, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i];
#pragma unroll 1
    while (y != 0u) {
        unsigned t = x % y;
        x = y;
        y = t;
    }
    out[i] = x;
}
