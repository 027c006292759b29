// Integer square root by binary search over [0, 65536): largest r with r*r <= x.
extern "C" __global__ void isqrt(const unsigned* a, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], lo = 0u, hi = 65536u;
#pragma unroll 1
    while (hi - lo > 1u) {
        unsigned mid = (lo + hi) >> 1;
        if (mid * mid <= x) lo = mid; else hi = mid;
    }
    out[i] = lo;
}
