// Clamp to [lo, hi] with min/max, and a saturating unsigned add.
extern "C" __global__ void clamp(const int* a, int* out, int lo, int hi)
{
    int i = threadIdx.x;
    int x = a[i];
    out[2 * i + 0] = min(max(x, lo), hi);
    unsigned u = (unsigned)x, s = u + 0x40000000u;
    out[2 * i + 1] = (int)(s < u ? 0xffffffffu : s);
}
