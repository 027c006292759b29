// PTX div.u32 / rem.u32 with zero divisors (hardware: x/0 = 0xffffffff, x%0 = x).
extern "C" __global__ void div_zero_asm(const unsigned* a, const unsigned* b, unsigned* out)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i], q, r;
    asm("div.u32 %0, %1, %2;" : "=r"(q) : "r"(x), "r"(y));
    asm("rem.u32 %0, %1, %2;" : "=r"(r) : "r"(x), "r"(y));
    out[2 * i + 0] = q;
    out[2 * i + 1] = r;
}
