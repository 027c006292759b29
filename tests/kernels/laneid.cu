// %laneid read through inline PTX (4-thread CTAs, so it equals threadIdx.x everywhere).
extern "C" __global__ void laneid(int* out)
{
    unsigned l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    out[blockIdx.x * 4 + threadIdx.x] = (int)(l * 16u + threadIdx.x);
}
