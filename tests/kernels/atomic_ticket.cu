// Ticket dispenser: the value atomicAdd returns is used as a slot index. Which thread gets
// which ticket depends on the order, but the set of slots written does not.
extern "C" __global__ void atomic_ticket(int* next, int* slots)
{
    int ticket = atomicAdd(next, 1);
    slots[ticket] = 1;
}
