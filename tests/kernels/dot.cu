// Dot product of two n-element vectors, computed serially by thread 0 of CTA 0
// (correct for any launch shape).
extern "C" __global__ void dot(const int* a, const int* b, int* out, int n)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int s = 0;
#pragma unroll 1
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    out[0] = s;
}
