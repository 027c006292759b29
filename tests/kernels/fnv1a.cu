// FNV-1a hash over n bytes starting at byte offset 5*i: byte loads in a loop.
extern "C" __global__ void fnv1a(const int* packed, unsigned* out, int n)
{
    const unsigned char* p = (const unsigned char*)packed + 5 * threadIdx.x;
    unsigned h = 2166136261u;
#pragma unroll 1
    for (int k = 0; k < n; ++k) h = (h ^ p[k]) * 16777619u;
    out[threadIdx.x] = h;
}
