// __brev, and a bit-reversal permutation of 8 elements: out[rev3(i)] = a[i].
extern "C" __global__ void brev(const unsigned* a, unsigned* out, int* perm)
{
    int i = threadIdx.x;
    out[i] = __brev(a[i]);
    perm[__brev((unsigned)i) >> 29] = (int)a[i];
}
