// A predicated store (inline PTX `@%q st`): only the flagged threads write their word.
extern "C" __global__ void guarded_store(const unsigned* flags, unsigned* out)
{
    unsigned t = threadIdx.x;
    unsigned f = flags[t];
    unsigned* p = out + t;
    asm volatile("{ .reg .pred %%q; setp.ne.u32 %%q, %0, 0; @%%q st.global.u32 [%1], %2; }"
                 :: "r"(f), "l"(p), "r"(t + 100u) : "memory");
}
