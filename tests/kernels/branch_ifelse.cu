// Three-way divergent if / else if / else with a store inside each arm, then reconvergence.
extern "C" __global__ void branch_ifelse(const int* a, int* out, int* side)
{
    int i = threadIdx.x;
    int x = a[i];
    int y;
    if (i % 3 == 0) {
        y = x * 2;
        side[i] = 1;
    } else if (i % 3 == 1) {
        y = x - 5;
        side[i] = 2;
    } else {
        y = -x;
        side[i] = 3;
    }
    out[i] = y + i;
}
