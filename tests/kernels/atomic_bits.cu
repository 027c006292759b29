// atomicAnd / atomicOr / atomicXor: the final word does not depend on the order.
extern "C" __global__ void atomic_bits(const unsigned* a, unsigned* out)
{
    unsigned v = a[threadIdx.x];
    atomicAnd(&out[0], v);
    atomicOr(&out[1], v);
    atomicXor(&out[2], v);
}
