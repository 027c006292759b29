// atomicInc wraps to 0 past its limit; atomicDec wraps to its limit at 0 or above it.
extern "C" __global__ void atomic_inc_dec(unsigned* inc, unsigned* dec)
{
    atomicInc(inc, 7u);
    atomicDec(dec, 5u);
}
