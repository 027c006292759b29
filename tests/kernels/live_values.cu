// Six loaded values stay live across a rolled loop (register-allocation pressure).
extern "C" __global__ void live_values(const int* a, int* out, int n)
{
    int i = threadIdx.x;
    int a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5];
    int s = i;
#pragma unroll 1
    for (int k = 0; k < n; ++k) s = s * 3 + (((a0 * k + a1) ^ a2) - a3 * i + (a4 | k) - a5);
    out[i] = s;
}
