// Triangular nested loops with per-lane outer trip counts.
extern "C" __global__ void nested_loop(const int* rows, int* out)
{
    int i = threadIdx.x;
    int n = rows[i];
    int s = 0;
#pragma unroll 1
    for (int r = 0; r < n; ++r) {
#pragma unroll 1
        for (int c = 0; c <= r; ++c) s += (r + 1) * (c + i);
    }
    out[i] = s;
}
