// atomicExch: exactly one thread sees the flag's initial 0; private slots swap values.
extern "C" __global__ void atomic_exch(int* flag, int* winners, int* slots)
{
    int t = threadIdx.x;
    int old = atomicExch(flag, 1);
    atomicAdd(winners, old == 0 ? 1 : 0);
    int prev = atomicExch(&slots[t], t * 10);
    slots[t + 8] = prev;
}
