// Mathematical (floored) modulo from C's truncating remainder: ((x % m) + m) % m.
extern "C" __global__ void mod_floor(const int* a, int* out, int m)
{
    int i = threadIdx.x;
    int x = a[i];
    out[i] = ((x % m) + m) % m;
}
