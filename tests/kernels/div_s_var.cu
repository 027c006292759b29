// Signed division and remainder by a runtime divisor: C truncates toward zero and the
// remainder takes the sign of the dividend.
extern "C" __global__ void div_s_var(const int* a, const int* b, int* q, int* r)
{
    int i = threadIdx.x;
    int x = a[i], y = b[i];
    q[i] = x / y;
    r[i] = x % y;
}
