// Gather through one index array and scatter through a permutation.
extern "C" __global__ void gather_scatter(const int* a, const int* idx, const int* perm,
                                          int* g, int* s)
{
    int i = threadIdx.x;
    g[i] = a[idx[i]];
    s[perm[i]] = a[i];
}
