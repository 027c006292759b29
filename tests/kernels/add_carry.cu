// 32-bit unsigned addition with carry out detected by an unsigned compare.
extern "C" __global__ void add_carry(const unsigned* a, const unsigned* b, unsigned* sum,
                                     unsigned* carry)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i];
    unsigned s = x + y;
    sum[i] = s;
    carry[i] = s < x ? 1u : 0u;
}
