// PTX shifts by amounts >= 32 (clamped: shl / shr.u32 give 0, shr.s32 gives the sign fill).
extern "C" __global__ void shift_asm(const unsigned* a, const unsigned* s, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], k = s[i], l, r, q;
    asm("shl.b32 %0, %1, %2;" : "=r"(l) : "r"(x), "r"(k));
    asm("shr.u32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(k));
    asm("shr.s32 %0, %1, %2;" : "=r"(q) : "r"(x), "r"(k));
    out[3 * i + 0] = l;
    out[3 * i + 1] = r;
    out[3 * i + 2] = q;
}
