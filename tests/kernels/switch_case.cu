// A small switch with fallthrough and default.
extern "C" __global__ void switch_case(const int* a, int* out)
{
    int i = threadIdx.x;
    int x = a[i];
    int y = 0;
    switch (x & 3) {
    case 0: y = x + 100; break;
    case 1: y = x * 5; // fallthrough
    case 2: y += 7; break;
    default: y = -x; break;
    }
    out[i] = y;
}
