// atomicCAS on each thread's own word: swaps where the word holds the expected value.
extern "C" __global__ void cas_own(unsigned* words, const unsigned* expect, unsigned* old)
{
    int t = threadIdx.x;
    old[t] = atomicCAS(&words[t], expect[t], 1000u + t);
}
