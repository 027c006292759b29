// xorshift32 PRNG: k rounds of shift / xor on unsigned state.
extern "C" __global__ void xorshift(const unsigned* seed, unsigned* out, int rounds)
{
    int i = threadIdx.x;
    unsigned x = seed[i];
#pragma unroll 1
    for (int k = 0; k < rounds; ++k) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
    }
    out[i] = x;
}
