// Unsigned division and remainder by a runtime divisor.
extern "C" __global__ void div_u_var(const unsigned* a, const unsigned* b, unsigned* q,
                                     unsigned* r)
{
    int i = threadIdx.x;
    unsigned x = a[i], y = b[i];
    q[i] = x / y;
    r[i] = x % y;
}
