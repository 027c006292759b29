// The ready kernels behind `qgpu calc` and the chat's normal mode: one kernel per
// operation, integers in int32 as numpy holds them, exact as Python computes them.
//
// Every number a kernel works on comes in as an argument: NVRTC folds constants written
// in the source, so a number baked into a kernel would be computed by the compiler, not by
// the machine. Elementwise kernels take one thread per element (the host picks the grid);
// reductions and scans run on one warp, its lanes striding over the elements. Loops stay
// rolled (`#pragma unroll 1`): the machine has 15 registers.
//
// A result int32 cannot hold, or an operation Python refuses, sets a bit in a thread's
// `bad` word; the kernel ORs the bits into err[0] once, and the host turns them into the
// error message. Sums and sums of products are exact on the way: they accumulate in two
// words (a 64-bit two's complement value), so only the final value must fit in int32, as
// with Python's integers.

#define ERR_OVERFLOW 1
#define ERR_ZERO_DIVISION 2
#define ERR_NEGATIVE 4

// ----------------------------------------------------------------- exact helpers

__device__ __forceinline__ int add_checked(int x, int y, int& bad)
{
    int r = (int)((unsigned)x + (unsigned)y);
    if (((x ^ r) & (y ^ r)) < 0) bad |= ERR_OVERFLOW;
    return r;
}

__device__ __forceinline__ int sub_checked(int x, int y, int& bad)
{
    int r = (int)((unsigned)x - (unsigned)y);
    if (((x ^ y) & (x ^ r)) < 0) bad |= ERR_OVERFLOW;
    return r;
}

// lo/hi: a 64-bit accumulator; adding x (sign-extended) or x*y (the full product)
__device__ __forceinline__ void acc_add(unsigned& lo, int& hi, int x)
{
    unsigned s = lo + (unsigned)x;
    hi += (x < 0 ? -1 : 0) + (s < lo ? 1 : 0);
    lo = s;
}

// both in int16: their product fits in 31 bits
__device__ __forceinline__ bool both_short(int x, int y)
{
    return ((unsigned)(x + 32768) | (unsigned)(y + 32768)) < 65536u;
}

// x * y in full: 16-bit halves, so that no partial product leaves int32 (the machine has no
// high multiply; the lowering's expansion of one needs more registers than these kernels
// have). The accumulator's high word is checked: a sum past 2**63 is an overflow too.
__device__ __forceinline__ void acc_add_product(unsigned& lo, int& hi, int x, int y, int& bad)
{
    int xh = x >> 16, yh = y >> 16;
    int xl = x & 0xffff, yl = y & 0xffff;
    unsigned s = lo + (unsigned)xl * (unsigned)yl;  // below 2**32: fits unsigned
    hi = add_checked(hi, s < lo ? 1 : 0, bad);
    lo = s;
    int cross[2] = {xh * yl, xl * yh};  // each within int32
#pragma unroll
    for (int c = 0; c < 2; c++) {
        s = lo + ((unsigned)cross[c] << 16);
        hi = add_checked(hi, (cross[c] >> 16) + (s < lo ? 1 : 0), bad);
        lo = s;
    }
    hi = add_checked(hi, xh * yh, bad);
}

__device__ __forceinline__ void acc_add_acc(unsigned& lo, int& hi, unsigned lo2, int hi2,
                                            int& bad)
{
    unsigned s = lo + lo2;
    hi = add_checked(add_checked(hi, hi2, bad), s < lo ? 1 : 0, bad);
    lo = s;
}

__device__ __forceinline__ int acc_value(unsigned lo, int hi, int& bad)
{
    if (hi != ((int)lo >> 31)) bad |= ERR_OVERFLOW;
    return (int)lo;
}

__device__ __forceinline__ int mul_checked(int x, int y, int& bad)
{
    if (both_short(x, y)) return x * y;
    unsigned lo = 0u;
    int hi = 0;
    acc_add_product(lo, hi, x, y, bad);
    return acc_value(lo, hi, bad);
}

// the warp's accumulators summed into lane 0's (shuffles within the launch's warp)
__device__ __forceinline__ void acc_reduce_warp(unsigned& lo, int& hi, int& bad)
{
    #pragma unroll 1
    for (int offset = blockDim.x / 2; offset > 0; offset /= 2) {
        unsigned lo2 = __shfl_down_sync(0xffffffffu, lo, offset);
        int hi2 = __shfl_down_sync(0xffffffffu, hi, offset);
        acc_add_acc(lo, hi, lo2, hi2, bad);
    }
}

// ------------------------------------------------------------ elementwise, binary
// numpy's broadcasting is the host's: it copies a scalar operand into every element.

#define ELEMENTWISE(name, expr)                                                        \
    extern "C" __global__ void name(const int* a, const int* b, int* out, int n, int* err) \
    {                                                                                  \
        int i = blockIdx.x * blockDim.x + threadIdx.x;                                 \
        if (i < n) {                                                                   \
            int x = a[i], y = b[i], bad = 0;                                           \
            out[i] = expr;                                                             \
            if (bad) atomicOr(err, bad);                                               \
        }                                                                              \
    }

__device__ __forceinline__ int floordiv_checked(int x, int y, int& bad)
{
    if (y == 0) {
        bad |= ERR_ZERO_DIVISION;
        return 0;
    }
    if (y == -1) return sub_checked(0, x, bad);  // INT_MIN // -1 leaves int32
    int q = x / y;
    if (x - q * y != 0 && (x ^ y) < 0) q -= 1;  // Python floors, C truncates
    return q;
}

__device__ __forceinline__ int floormod_checked(int x, int y, int& bad)
{
    if (y == 0) {
        bad |= ERR_ZERO_DIVISION;
        return 0;
    }
    if (y == -1) return 0;
    int r = x % y;
    if (r != 0 && (r ^ y) < 0) r += y;  // the sign of the divisor, as in Python
    return r;
}

__device__ __forceinline__ int power_checked(int x, int e, int& bad)
{
    if (e < 0) {
        bad |= ERR_NEGATIVE;
        return 0;
    }
    int r = 1;
    #pragma unroll 1
    while (e > 0) {  // square and multiply; a square is taken only while still needed
        if (e & 1) r = mul_checked(r, x, bad);
        e >>= 1;
        if (e > 0) x = mul_checked(x, x, bad);
    }
    return r;
}

__device__ __forceinline__ unsigned gcd_unsigned(unsigned x, unsigned y)
{
    #pragma unroll 1
    while (y != 0u) {
        unsigned t = x % y;
        x = y;
        y = t;
    }
    return x;
}

__device__ __forceinline__ unsigned magnitude(int x)
{
    return x < 0 ? 0u - (unsigned)x : (unsigned)x;
}

__device__ __forceinline__ int gcd_checked(int x, int y, int& bad)
{
    unsigned g = gcd_unsigned(magnitude(x), magnitude(y));
    if (g > 0x7fffffffu) bad |= ERR_OVERFLOW;  // gcd(INT_MIN, 0) = 2**31
    return (int)g;
}

__device__ __forceinline__ int lcm_checked(int x, int y, int& bad)
{
    unsigned ax = magnitude(x), ay = magnitude(y);
    if (ax == 0u || ay == 0u) return 0;
    unsigned q = ax / gcd_unsigned(ax, ay);
    if (q > 0x7fffffffu || ay > 0x7fffffffu) {  // a factor of 2**31 times at least 1
        bad |= ERR_OVERFLOW;
        return 0;
    }
    return mul_checked((int)q, (int)ay, bad);
}

ELEMENTWISE(calc_add, add_checked(x, y, bad))
ELEMENTWISE(calc_sub, sub_checked(x, y, bad))
ELEMENTWISE(calc_mul, mul_checked(x, y, bad))
ELEMENTWISE(calc_floordiv, floordiv_checked(x, y, bad))
ELEMENTWISE(calc_mod, floormod_checked(x, y, bad))
ELEMENTWISE(calc_pow, power_checked(x, y, bad))
ELEMENTWISE(calc_gcd, gcd_checked(x, y, bad))
ELEMENTWISE(calc_lcm, lcm_checked(x, y, bad))

// --------------------------------------------------------------- elementwise, unary

#define UNARY(name, expr)                                                                \
    extern "C" __global__ void name(const int* a, int* out, int n, int* err)           \
    {                                                                                  \
        int i = blockIdx.x * blockDim.x + threadIdx.x;                                 \
        int bad = 0;                                                                   \
        if (i < n) out[i] = expr(a[i], bad);                                           \
        if (bad) atomicOr(err, bad);                                                   \
    }

__device__ __forceinline__ int factorial_checked(int n, int& bad)
{
    if (n < 0) {
        bad |= ERR_NEGATIVE;
        return 0;
    }
    int r = 1;
    #pragma unroll 1
    for (int k = 2; k <= n; k++) {
        r = mul_checked(r, k, bad);
        if (bad & ERR_OVERFLOW) break;  // no point multiplying on
    }
    return r;
}

__device__ __forceinline__ int fib_checked(int n, int& bad)
{
    if (n < 0) {
        bad |= ERR_NEGATIVE;
        return 0;
    }
    if (n == 0) return 0;
    int a = 0, b = 1;  // fib(k - 1), fib(k): fib(n + 1) is never computed
    #pragma unroll 1
    for (int k = 1; k < n; k++) {
        int next = add_checked(a, b, bad);
        a = b;
        b = next;
        if (bad & ERR_OVERFLOW) break;
    }
    return b;
}

__device__ __forceinline__ int isqrt_checked(int n, int& bad)
{
    if (n < 0) {
        bad |= ERR_NEGATIVE;
        return 0;
    }
    unsigned r = 0u;
    #pragma unroll 1
    for (unsigned bit = 1u << 15; bit != 0u; bit >>= 1) {  // the root has 16 bits
        unsigned t = r | bit;
        if (t * t <= (unsigned)n) r = t;
    }
    return (int)r;
}

__device__ __forceinline__ int neg_checked(int x, int& bad) { return sub_checked(0, x, bad); }
__device__ __forceinline__ int abs_checked(int x, int& bad)
{
    return x < 0 ? sub_checked(0, x, bad) : x;
}
__device__ __forceinline__ int popcount(int x, int&) { return __popc((unsigned)x); }

UNARY(calc_neg, neg_checked)
UNARY(calc_abs, abs_checked)
UNARY(calc_popcount, popcount)
UNARY(calc_factorial, factorial_checked)
UNARY(calc_fib, fib_checked)
UNARY(calc_isqrt, isqrt_checked)

// isprime: one CTA of one warp per element, its lanes sharing the odd trial divisors (d * d
// stays below 2**32 in unsigned arithmetic: d never passes 46341 + twice the warp's width)
extern "C" __global__ void calc_isprime(const int* a, int* out)
{
    int* verdict = out + blockIdx.x;
    int x = a[blockIdx.x];
    int composite = x % 2 == 0 && x != 2;
    #pragma unroll 1
    for (unsigned d = 3u + 2u * threadIdx.x; d * d <= (unsigned)x && !composite && x > 0;
         d += 2u * blockDim.x)
        composite = (unsigned)x % d == 0u;
    composite = __any_sync(0xffffffffu, composite);
    if (threadIdx.x == 0) *verdict = (x >= 2 && !composite) ? 1 : 0;
}

// ---------------------------------------------------------------------- reductions

extern "C" __global__ void calc_sum(const int* a, int n, int* out, int* err)
{
    int bad = 0;
    unsigned lo = 0u;
    int hi = 0;
    #pragma unroll 1
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc_add(lo, hi, a[i]);
    acc_reduce_warp(lo, hi, bad);
    if (threadIdx.x == 0) out[0] = acc_value(lo, hi, bad);
    if (bad) atomicOr(err, bad);
}

// the largest or smallest element: each lane's, then the warp's by shuffles
#define EXTREMUM(name, pick)                                                             \
    extern "C" __global__ void name(const int* a, int n, int* out)                     \
    {                                                                                  \
        int best = a[0];                                                               \
        _Pragma("unroll 1")                                                            \
        for (int i = threadIdx.x; i < n; i += blockDim.x) best = pick(best, a[i]);     \
        _Pragma("unroll 1")                                                            \
        for (int offset = blockDim.x / 2; offset > 0; offset /= 2)                     \
            best = pick(best, __shfl_down_sync(0xffffffffu, best, offset));            \
        if (threadIdx.x == 0) out[0] = best;                                           \
    }

EXTREMUM(calc_max, max)
EXTREMUM(calc_min, min)

// ------------------------------------------------------------------ rearrangements

// each element's place: the smaller elements, and the equal ones before it (stable)
extern "C" __global__ void calc_sort(const int* a, int* out, int n)
{
    #pragma unroll 1
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int x = a[i], rank = 0;
        #pragma unroll 1
        for (int j = 0; j < n; j++) {
            int y = a[j];
            rank += (y < x || (y == x && j < i)) ? 1 : 0;
        }
        out[rank] = x;
    }
}

extern "C" __global__ void calc_reverse(const int* a, int* out, int n)
{
    #pragma unroll 1
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[n - 1 - i] = a[i];
}

// every prefix summed exactly on its own (the lanes share the prefixes)
extern "C" __global__ void calc_cumsum(const int* a, int* out, int n, int* err)
{
    int bad = 0;
    #pragma unroll 1
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        unsigned lo = 0u;
        int hi = 0;
        #pragma unroll 1
        for (int j = 0; j <= i; j++) acc_add(lo, hi, a[j]);
        out[i] = acc_value(lo, hi, bad);
    }
    if (bad) atomicOr(err, bad);
}

// ------------------------------------------------------------------- linear algebra

// out[m x p] = a[m x k] @ b[k x p]: one CTA per row of out, one thread per column; the host
// passes b transposed (bt, p x k), so that both operands are read along rows
#define MATMUL(name, accumulate)                                                         \
    extern "C" __global__ void name(const int* a, const int* bt, int* out, int k, int* err) \
    {                                                                                  \
        const int* x = a + blockIdx.x * k;                                             \
        const int* y = bt + threadIdx.x * k;                                           \
        int bad = 0;                                                                   \
        unsigned lo = 0u;                                                              \
        int hi = 0;                                                                    \
        _Pragma("unroll 1")                                                            \
        for (int left = k; left > 0; left--, x++, y++) accumulate(lo, hi, *x, *y, bad); \
        out[blockIdx.x * blockDim.x + threadIdx.x] = acc_value(lo, hi, bad);           \
        if (bad) atomicOr(err, bad);                                                   \
    }

// operands that all fit in int16 (the host checks): each product fits in 31 bits, so only
// the sum needs two words
__device__ __forceinline__ void acc_add_short_product(unsigned& lo, int& hi, int x, int y, int&)
{
    acc_add(lo, hi, x * y);
}

MATMUL(calc_matmul, acc_add_product)
MATMUL(calc_matmul_short, acc_add_short_product)

// ------------------------------------------------------------------------- primes

// the primes up to n, in order, into out[0 .. count-1]; out has n + 1 words
extern "C" __global__ void calc_primes(int n, int* out, int* count)
{
    #pragma unroll 1
    for (int x = threadIdx.x; x <= n; x += blockDim.x) {
        int prime = x >= 2;
        #pragma unroll 1
        for (int d = 2; d * d <= x; d++)
            if (x % d == 0) prime = 0;
        out[x] = prime;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // compaction in place: the k-th prime lands at k <= x
        int k = 0;
        #pragma unroll 1
        for (int x = 0; x <= n; x++)
            if (out[x]) out[k++] = x;
        count[0] = k;
    }
}
