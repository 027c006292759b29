"""The qgpu kernel suite: CUDA kernels with independent oracles.

Each `Case` names one kernel of one `.cu` file in this folder, a launch shape, a way to
build the arguments and an oracle. The oracles are plain Python / numpy written for their
kernel; nothing here imports qwengpu, because this file is also loaded by file path from
`qgpu conform` to check the same cases on a real NVIDIA GPU.

Conventions:
* `make_args(rng)` returns the kernel arguments in parameter order: numpy int32 / uint32
  arrays for pointer parameters, np.int32 / np.uint32 scalars for value parameters.
* `oracle(args)` receives (deep copies of) those arguments and returns the list the
  launch must leave behind: arrays hold their final contents, scalars are unchanged.
* Every result is deterministic on real hardware: warp-level operations only appear in
  4-thread CTAs or with a width of at most 4, and atomics only build order-independent
  final states.
* `hardware_defined` marks cases whose expected value is what PTX / the hardware defines
  for an operation C leaves undefined (division by zero through inline PTX).
"""

import bisect
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KERNEL_DIR = Path(__file__).resolve().parent
SUITE_WARP_LANES = 4
"""The warp width the suite's warp-level kernels are written for: on a narrower machine
they need `narrow_warps=True` (and then equal the interpreter, not the oracle)."""

M32 = 0xFFFFFFFF
INT_MIN = -(2**31)
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    make_args: Callable[[np.random.Generator], list]
    oracle: Callable[[list], list]
    tags: tuple[str, ...] = ()
    hardware_defined: bool = False


def load_source(case: Case) -> str:
    """The CUDA source of a case's kernel file."""
    return (KERNEL_DIR / case.file).read_text()


# --------------------------------------------------------------------------------------
# helpers: 32-bit values as Python ints, and conversion to / from numpy arrays
# --------------------------------------------------------------------------------------


def s32(v: int) -> int:
    """Wrap a Python int to a signed 32-bit value."""
    v &= M32
    return v - (1 << 32) if v & 0x80000000 else v


def u32(v: int) -> int:
    return v & M32


def i32a(values) -> np.ndarray:
    """An int32 array from Python ints (wrapped modulo 2^32)."""
    return np.array([u32(int(v)) for v in values], dtype=np.uint32).view(np.int32)


def u32a(values) -> np.ndarray:
    return np.array([u32(int(v)) for v in values], dtype=np.uint32)


def like(ref: np.ndarray, values) -> np.ndarray:
    """An array with `ref`'s dtype holding `values` (wrapped modulo 2^32)."""
    return np.array([u32(int(v)) for v in values], dtype=np.uint32).view(ref.dtype)


def ints(arr) -> list[int]:
    return [int(v) for v in arr]


def uints(arr) -> list[int]:
    return [int(v) & M32 for v in arr]


def tdiv(a: int, b: int) -> int:
    """C division: truncation toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def trem(a: int, b: int) -> int:
    """C remainder: sign of the dividend."""
    return a - b * tdiv(a, b)


def pack_bytes(data) -> np.ndarray:
    """Little-endian pack of a byte list (length a multiple of 4) into int32 words."""
    data = [int(b) & 0xFF for b in data]
    assert len(data) % 4 == 0
    words = [
        data[k] | (data[k + 1] << 8) | (data[k + 2] << 16) | (data[k + 3] << 24)
        for k in range(0, len(data), 4)
    ]
    return i32a(words)


def unpack_bytes(arr) -> list[int]:
    out: list[int] = []
    for w in uints(arr):
        out += [(w >> (8 * k)) & 0xFF for k in range(4)]
    return out


def sbyte(b: int) -> int:
    return b - 256 if b >= 128 else b


def rand_i32(rng: np.random.Generator, n: int, lo: int = INT_MIN, hi: int = INT_MAX) -> list[int]:
    return [int(v) for v in rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64)]


def rand_u32(rng: np.random.Generator, n: int, lo: int = 0, hi: int = M32) -> list[int]:
    return [int(v) for v in rng.integers(lo, hi, size=n, endpoint=True, dtype=np.int64)]


def rand_bits(rng: np.random.Generator, n: int) -> list[int]:
    """Unsigned values of assorted magnitudes (random bit length 0..32)."""
    lens = rng.integers(0, 33, size=n)
    return [int(rng.integers(0, 1 << int(k), endpoint=False)) if k else 0 for k in lens]


CASES: list[Case] = []


def case(
    name: str,
    file: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    make_args: Callable[[np.random.Generator], list],
    oracle: Callable[[list], list],
    tags: tuple[str, ...],
    kernel: str | None = None,
    hardware_defined: bool = False,
) -> None:
    CASES.append(
        Case(
            name=name,
            file=file,
            kernel=kernel or file.removesuffix(".cu"),
            grid=grid,
            block=block,
            make_args=make_args,
            oracle=oracle,
            tags=tags,
            hardware_defined=hardware_defined,
        )
    )


G1 = (1, 1, 1)


def B(x: int, y: int = 1, z: int = 1) -> tuple[int, int, int]:
    return (x, y, z)


# --------------------------------------------------------------------------------------
# arithmetic
# --------------------------------------------------------------------------------------


def _vec_add_args(n: int, size: int):
    def make(rng):
        return [
            i32a(rand_i32(rng, size, -(10**6), 10**6)),
            i32a(rand_i32(rng, size, -(10**6), 10**6)),
            i32a([-1] * size),
            np.int32(n),
        ]

    return make


def _vec_add_ref(args):
    a, b, c, n = args
    out = ints(c)
    for i in range(int(n)):
        out[i] = int(a[i]) + int(b[i])
    return [a, b, like(c, out), n]


case(
    "vec_add",
    "vec_add.cu",
    (4, 1, 1),
    B(4),
    _vec_add_args(13, 13),
    _vec_add_ref,
    ("add_sub_mul", "idx_1d", "multi_cta", "early_return", "classic"),
)
case(
    "vec_add_one_cta",
    "vec_add.cu",
    G1,
    B(16),
    _vec_add_args(11, 14),
    _vec_add_ref,
    ("add_sub_mul", "idx_1d", "early_return", "classic"),
)


def _sub_mul_args(rng):
    edges_a = [0, M32, 0x80000000, 1]
    edges_b = [1, M32, 0x80000000, M32]
    return [u32a(edges_a + rand_u32(rng, 4)), u32a(edges_b + rand_u32(rng, 4)), u32a([0] * 24)]


def _sub_mul_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(uints(a), uints(b), strict=True):
        res += [x - y, x * y, x * y + x - (y << 3)]
    return [a, b, like(out, res)]


case(
    "sub_mul_wrap",
    "sub_mul_wrap.cu",
    G1,
    B(8),
    _sub_mul_args,
    _sub_mul_ref,
    ("add_sub_mul", "wraparound"),
)


def _mulhi_args(rng):
    a = [M32, 0x80000000, M32, 0x7FFFFFFF, 0x80000000, 0x12345678]
    b = [M32, 0x80000000, 1, 0x7FFFFFFF, 0x7FFFFFFF, 0x9ABCDEF0]
    return [u32a(a + rand_u32(rng, 2)), u32a(b + rand_u32(rng, 2)), u32a([0] * 16)]


def _mulhi_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(uints(a), uints(b), strict=True):
        res += [(x * y) >> 32, (s32(x) * s32(y)) >> 32]
    return [a, b, like(out, res)]


case("mulhi", "mulhi.cu", G1, B(8), _mulhi_args, _mulhi_ref, ("mulhi", "add_sub_mul"))


def _saxpy_args(rng):
    return [
        np.int32(20),
        np.int32(-3),
        i32a(rand_i32(rng, 20, -1000, 1000)),
        i32a(rand_i32(rng, 20, -1000, 1000)),
    ]


def _saxpy_ref(args):
    n, a, x, y = args
    res = [int(a) * xi + yi for xi, yi in zip(ints(x), ints(y), strict=True)]
    return [n, a, x, like(y, res)]


case(
    "saxpy_int",
    "saxpy_int.cu",
    (3, 1, 1),
    B(8),
    _saxpy_args,
    _saxpy_ref,
    ("add_sub_mul", "idx_1d", "multi_cta", "early_return", "classic"),
)


def _add_carry_args(rng):
    a = [M32, 0x80000000, 0, M32, 0x7FFFFFFF]
    b = [1, 0x80000000, 0, M32, 1]
    return [u32a(a + rand_u32(rng, 3)), u32a(b + rand_u32(rng, 3)), u32a([0] * 8), u32a([9] * 8)]


def _add_carry_ref(args):
    a, b, s, c = args
    xs, ys = uints(a), uints(b)
    sums = [(x + y) & M32 for x, y in zip(xs, ys, strict=True)]
    carry = [1 if x + y > M32 else 0 for x, y in zip(xs, ys, strict=True)]
    return [a, b, like(s, sums), like(c, carry)]


case(
    "add_carry",
    "add_carry.cu",
    G1,
    B(8),
    _add_carry_args,
    _add_carry_ref,
    ("add_sub_mul", "wraparound", "cmp_signed_unsigned"),
)


# -- division ---------------------------------------------------------------------------


def _div_u_args(rng):
    a = [100, 5, M32, M32, 0, 0x80000000] + rand_u32(rng, 2)
    b = [7, 9, 1, M32, 3, 0x10] + [int(v) for v in rng.integers(1, 1 << 16, size=2)]
    return [u32a(a), u32a(b), u32a([0] * 8), u32a([0] * 8)]


def _div_u_ref(args):
    a, b, q, r = args
    xs, ys = uints(a), uints(b)
    return [
        a,
        b,
        like(q, [x // y for x, y in zip(xs, ys, strict=True)]),
        like(r, [x % y for x, y in zip(xs, ys, strict=True)]),
    ]


case(
    "div_u_var",
    "div_u_var.cu",
    G1,
    B(8),
    _div_u_args,
    _div_u_ref,
    ("div_var", "div_unsigned"),
)


def _div_s_args(rng):
    a = [7, -7, 7, -7, INT_MIN, INT_MAX, -1, 0]
    b = [2, 2, -2, -2, 3, -1, INT_MIN, -5]
    k = int(rng.integers(0, 8))  # one random pair replaces a fixed one
    a[k] = int(rng.integers(-(10**9), 10**9))
    b[k] = int(rng.choice([-1, 1])) * int(rng.integers(1, 1000))
    return [i32a(a), i32a(b), i32a([0] * 8), i32a([0] * 8)]


def _div_s_ref(args):
    a, b, q, r = args
    xs, ys = ints(a), ints(b)
    return [
        a,
        b,
        like(q, [tdiv(x, y) for x, y in zip(xs, ys, strict=True)]),
        like(r, [trem(x, y) for x, y in zip(xs, ys, strict=True)]),
    ]


case(
    "div_s_var",
    "div_s_var.cu",
    G1,
    B(8),
    _div_s_args,
    _div_s_ref,
    ("div_var", "div_signed", "neg_div"),
)


def _div_const_args(rng):
    return [i32a([-17, -7, -1, 0, 16, INT_MIN, INT_MAX] + rand_i32(rng, 1)), i32a([0] * 40)]


def _div_const_ref(args):
    a, out = args
    res = []
    for x in ints(a):
        res += [tdiv(x, 7), trem(x, 7), tdiv(x, -3), tdiv(x, 16), trem(x, 16)]
    return [a, like(out, res)]


case(
    "div_const",
    "div_const.cu",
    G1,
    B(8),
    _div_const_args,
    _div_const_ref,
    ("div_const", "div_signed", "div_unsigned", "neg_div"),
)


def _div_const_u_args(rng):
    return [u32a([0, 9, 10, 29, 30, M32, 0x80000000] + rand_u32(rng, 1)), u32a([0] * 24)]


def _div_const_u_ref(args):
    a, out = args
    res = []
    for x in uints(a):
        res += [x // 10, x % 10, x // 3]
    return [a, like(out, res)]


case(
    "div_const_u",
    "div_const_u.cu",
    G1,
    B(8),
    _div_const_u_args,
    _div_const_u_ref,
    ("div_const", "div_unsigned"),
)


def _mod_floor_args(m: int, lo: int, hi: int):
    def make(rng):
        xs = [lo, -1, 0, m, -m] + rand_i32(rng, 3, lo, hi)
        return [i32a(xs), i32a([0] * 8), np.int32(m)]

    return make


def _mod_floor_ref(args):
    a, out, m = args
    return [a, like(out, [x % int(m) for x in ints(a)]), m]


case(
    "mod_floor_small",
    "mod_floor.cu",
    G1,
    B(8),
    _mod_floor_args(7, -50, 50),
    _mod_floor_ref,
    ("div_var", "div_signed", "neg_div"),
    kernel="mod_floor",
)
case(
    "mod_floor_big",
    "mod_floor.cu",
    G1,
    B(8),
    _mod_floor_args(1000003, INT_MIN, INT_MAX - 1000003),
    _mod_floor_ref,
    ("div_var", "div_signed", "neg_div"),
    kernel="mod_floor",
)


def _div_zero_args(rng):
    a = rand_u32(rng, 8)
    b = [0, 0, 1, 0, 3, M32, 0, int(rng.integers(1, 1000))]
    return [u32a(a), u32a(b), u32a([0] * 16)]


def _div_zero_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(uints(a), uints(b), strict=True):
        res += [M32, x] if y == 0 else [x // y, x % y]
    return [a, b, like(out, res)]


case(
    "div_zero_asm",
    "div_zero_asm.cu",
    G1,
    B(8),
    _div_zero_args,
    _div_zero_ref,
    ("div_var", "div_unsigned", "div_zero", "inline_asm"),
    hardware_defined=True,
)


# -- min / max / abs ---------------------------------------------------------------------


def _minmax_args(rng):
    a = [-5, 3, -1, 0, INT_MAX, -100000, 7] + rand_i32(rng, 1, INT_MIN + 1)
    b = [3, -5, 1, 0, -1, 100, 7] + rand_i32(rng, 1)
    return [i32a(a), i32a(b), i32a([0] * 40)]


def _minmax_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(ints(a), ints(b), strict=True):
        res += [min(x, y), max(x, y), min(u32(x), u32(y)), max(u32(x), u32(y)), abs(x)]
    return [a, b, like(out, res)]


case(
    "minmax_abs",
    "minmax_abs.cu",
    G1,
    B(8),
    _minmax_args,
    _minmax_ref,
    ("minmax_abs", "cmp_signed_unsigned"),
)


def _clamp_args(rng):
    a = [-11, -10, 0, 100, 101, INT_MIN, INT_MAX, -1]
    a[int(rng.integers(0, 8))] = int(rng.integers(-200, 200))
    return [i32a(a), i32a([0] * 16), np.int32(-10), np.int32(100)]


def _clamp_ref(args):
    a, out, lo, hi = args
    res = []
    for x in ints(a):
        s = u32(x) + 0x40000000
        res += [min(max(x, int(lo)), int(hi)), M32 if s > M32 else s]
    return [a, like(out, res), lo, hi]


case(
    "clamp",
    "clamp.cu",
    G1,
    B(8),
    _clamp_args,
    _clamp_ref,
    ("minmax_abs", "wraparound", "select"),
)


def _sad_args(rng):
    return [
        i32a(rand_i32(rng, 16, -1000, 1000)),
        i32a(rand_i32(rng, 16, -1000, 1000)),
        i32a([0] * 4),
    ]


def _sad_ref(args):
    a, b, out = args
    xa, xb = ints(a), ints(b)
    res = [sum(abs(xa[4 * i + k] - xb[4 * i + k]) for k in range(4)) for i in range(4)]
    return [a, b, like(out, res)]


case("sad", "sad.cu", G1, B(4), _sad_args, _sad_ref, ("minmax_abs", "uniform_loop", "classic"))


# --------------------------------------------------------------------------------------
# bits, shifts, comparisons
# --------------------------------------------------------------------------------------


def _bitwise_args(rng):
    return [u32a(rand_u32(rng, 8)), u32a(rand_u32(rng, 8)), u32a([0] * 32)]


def _bitwise_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(uints(a), uints(b), strict=True):
        res += [x & y, x | (~y & M32), x ^ y, ~x & M32]
    return [a, b, like(out, res)]


case("bitwise", "bitwise.cu", G1, B(8), _bitwise_args, _bitwise_ref, ("bitwise",))


def _shifts_args(rng):
    s = [0, 1, 31, 32, 33, 63] + rand_u32(rng, 2, 0, 255)
    return [u32a(rand_u32(rng, 8)), u32a(s), u32a([0] * 24)]


def _shifts_ref(args):
    a, s, out = args
    res = []
    for x, k in zip(uints(a), uints(s), strict=True):
        k &= 31
        res += [x << k, x >> k, s32(x) >> k]
    return [a, s, like(out, res)]


case("shifts", "shifts.cu", G1, B(8), _shifts_args, _shifts_ref, ("shift",))


def _shift_const_args(rng):
    return [i32a([-1, 1, INT_MIN, INT_MAX, 0, -8] + rand_i32(rng, 2)), i32a([0] * 32)]


def _shift_const_ref(args):
    a, out = args
    res = []
    for x in ints(a):
        u = u32(x)
        res += [((u << 31) & M32) | (u >> 31), x >> 31, x >> 3, (u >> 1) ^ ((u << 7) & M32)]
    return [a, like(out, res)]


case(
    "shift_const",
    "shift_const.cu",
    G1,
    B(8),
    _shift_const_args,
    _shift_const_ref,
    ("shift", "bitwise"),
)


def _shift_asm_args(rng):
    a = rand_u32(rng, 8)
    for k in range(0, 8, 2):  # half the values have the sign bit set
        a[k] |= 0x80000000
    s = [0, 1, 31, 32, 33, 40, 255, M32]
    return [u32a(a), u32a(s), u32a([0] * 24)]


def _shift_asm_ref(args):
    a, s, out = args
    res = []
    for x, k in zip(uints(a), uints(s), strict=True):
        k = min(k, 32)  # PTX clamps shift amounts to the register width
        res += [(x << k) & M32, x >> k, s32(x) >> k]
    return [a, s, like(out, res)]


case(
    "shift_asm",
    "shift_asm.cu",
    G1,
    B(8),
    _shift_asm_args,
    _shift_asm_ref,
    ("shift", "shift_ge32", "inline_asm"),
)


def _rotate_args(rng):
    s = [1, 31, 16, 8] + rand_u32(rng, 4, 1, 31)
    return [u32a(rand_u32(rng, 8)), u32a(s), u32a([0] * 8)]


def _rotate_ref(args):
    a, s, out = args
    res = [((x << k) | (x >> (32 - k))) & M32 for x, k in zip(uints(a), uints(s), strict=True)]
    return [a, s, like(out, res)]


case("rotate", "rotate.cu", G1, B(8), _rotate_args, _rotate_ref, ("shift", "funnel_shift"))


def _cmp_args(rng):
    a = [-1, 1, INT_MIN, 0, 5, -3, INT_MAX] + rand_i32(rng, 1)
    b = [1, -1, INT_MAX, -1, 5, -2, INT_MIN] + rand_i32(rng, 1)
    return [i32a(a), i32a(b), i32a([0] * 32)]


def _cmp_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(ints(a), ints(b), strict=True):
        ux, uy = u32(x), u32(y)
        res += [int(x < y), int(ux < uy), 10 if x <= y else 20, x if ux >= uy else y]
    return [a, b, like(out, res)]


case(
    "cmp_signed_unsigned",
    "cmp_signed_unsigned.cu",
    G1,
    B(8),
    _cmp_args,
    _cmp_ref,
    ("cmp_signed_unsigned", "select"),
)


def _select_args(rng):
    return [
        i32a(rand_i32(rng, 8, -1000, 1000)),
        i32a(rand_i32(rng, 8, -1000, 1000)),
        i32a([0] * 16),
    ]


def _select_ref(args):
    a, b, out = args
    res = []
    for x, y in zip(ints(a), ints(b), strict=True):
        res += [abs(x - y), y if x & 1 else -y]
    return [a, b, like(out, res)]


case(
    "select_ternary",
    "select_ternary.cu",
    G1,
    B(8),
    _select_args,
    _select_ref,
    ("select", "predicated"),
)


def _predicated_args(rng):
    a = [-7, -4, 0, 1, 3, 8, 31] + rand_i32(rng, 1, -50, 50)
    return [i32a(a), i32a([12345] * 16)]


def _predicated_ref(args):
    a, out = args
    res = ints(out)
    for i, x in enumerate(ints(a)):
        y = 3 * x + 1 if x & 1 else x >> 1
        if y > 10:
            y -= 10
        res[i] = y
        if x < 0:
            res[i + 8] = x
    return [a, like(out, res)]


case(
    "predicated",
    "predicated.cu",
    G1,
    B(8),
    _predicated_args,
    _predicated_ref,
    ("predicated", "select", "divergent_if"),
)


def _switch_args(rng):
    return [i32a([0, 1, 2, 3, -1, -2, -3, -4]), i32a([0] * 8)]


def _switch_args_rand(rng):
    return [i32a(rand_i32(rng, 8, -1000, 1000)), i32a([0] * 8)]


def _switch_ref(args):
    a, out = args
    res = []
    for x in ints(a):
        c = x & 3
        res.append([x + 100, x * 5 + 7, 7, -x][c])
    return [a, like(out, res)]


case(
    "switch_case",
    "switch_case.cu",
    G1,
    B(8),
    _switch_args,
    _switch_ref,
    ("divergent_if", "switch"),
)
case(
    "switch_case_random",
    "switch_case.cu",
    G1,
    B(8),
    _switch_args_rand,
    _switch_ref,
    ("divergent_if", "switch"),
    kernel="switch_case",
)


# -- bit counting ----------------------------------------------------------------------


def _popc_args(rng):
    return [u32a([0, M32, 1, 0x80000000] + rand_u32(rng, 4)), i32a([0] * 8), i32a([5])]


def _popc_ref(args):
    a, out, total = args
    counts = [bin(x).count("1") for x in uints(a)]
    return [a, like(out, counts), like(total, [int(total[0]) + sum(counts)])]


case(
    "popc",
    "popc.cu",
    G1,
    B(8),
    _popc_args,
    _popc_ref,
    ("popc", "atomic_add", "atomic_global", "contention"),
)


def _clz32(x: int) -> int:
    return 32 - x.bit_length()


def _clz_args(rng):
    return [u32a([0, 1, 0x80000000, M32, 0x00010000] + rand_bits(rng, 3)), i32a([0] * 16)]


def _clz_ref(args):
    a, out = args
    res = []
    for x in uints(a):
        res += [_clz32(x), x.bit_length()]
    return [a, like(out, res)]


case("clz", "clz.cu", G1, B(8), _clz_args, _clz_ref, ("clz",))


def _brev32(x: int) -> int:
    return int(f"{x:032b}"[::-1], 2)


def _brev_args(rng):
    return [u32a([0, 1, 0x80000000, 0x12345678] + rand_u32(rng, 4)), u32a([0] * 8), i32a([-1] * 8)]


def _brev_ref(args):
    a, out, perm = args
    xs = uints(a)
    p = [0] * 8
    for i, x in enumerate(xs):
        p[int(f"{i:03b}"[::-1], 2)] = x
    return [a, like(out, [_brev32(x) for x in xs]), like(perm, p)]


case("brev", "brev.cu", G1, B(8), _brev_args, _brev_ref, ("brev", "gather_scatter"))


def _ffs32(x: int) -> int:
    x = u32(x)
    return (x & -x).bit_length()


def _ffs_args(rng):
    return [i32a([0, 1, -1, INT_MIN, 0x10, 6] + rand_i32(rng, 2)), i32a([0] * 8)]


def _ffs_ref(args):
    a, out = args
    return [a, like(out, [_ffs32(x) for x in ints(a)])]


case("ffs", "ffs.cu", G1, B(8), _ffs_args, _ffs_ref, ("ffs",))


def _ffs_args_rand(rng):
    return [i32a([s32(x) for x in rand_bits(rng, 8)]), i32a([0] * 8)]


case("ffs_random", "ffs.cu", G1, B(8), _ffs_args_rand, _ffs_ref, ("ffs",), kernel="ffs")


def _bit_tricks_args(rng):
    return [u32a([0, 1, 0x80000000, 12, M32, 64] + rand_bits(rng, 2)), u32a([0] * 32)]


def _bit_tricks_ref(args):
    a, out = args
    res = []
    for x in uints(a):
        g = x ^ (x >> 1)
        res += [
            x & (-x & M32),
            x & ((x - 1) & M32),
            int(x != 0 and x & (x - 1) == 0),
            bin(g).count("1") & 1,
        ]
    return [a, like(out, res)]


case(
    "bit_tricks",
    "bit_tricks.cu",
    G1,
    B(8),
    _bit_tricks_args,
    _bit_tricks_ref,
    ("bitwise", "popc", "wraparound", "select"),
)


def _ilog2_args(rng):
    a = [1, 2, 3, 4, 5, 0x80000000, 0x80000001, M32]
    a[int(rng.integers(2, 5))] = int(rng.integers(1, 1 << 20))
    return [u32a(a), u32a([0] * 16)]


def _ilog2_ref(args):
    a, out = args
    res = []
    for x in uints(a):
        nxt = 1 if x <= 1 else (2 << ((x - 1).bit_length() - 1)) & M32
        res += [x.bit_length() - 1, nxt]
    return [a, like(out, res)]


case("ilog2", "ilog2.cu", G1, B(8), _ilog2_args, _ilog2_ref, ("clz", "shift", "select"))


def _sign_extend_args(rng):
    return [u32a([0x80, 0x7F, 0xFFF, 0x800, 0x12345678] + rand_u32(rng, 3)), i32a([0] * 16)]


def _sign_extend_ref(args):
    a, out = args
    res = []
    for x in uints(a):
        b8, b12 = x & 0xFF, x & 0xFFF
        res += [b8 - 256 if b8 & 0x80 else b8, b12 - 4096 if b12 & 0x800 else b12]
    return [a, like(out, res)]


case(
    "sign_extend",
    "sign_extend.cu",
    G1,
    B(8),
    _sign_extend_args,
    _sign_extend_ref,
    ("shift", "bitwise"),
)


def _gray_args(rng):
    return [u32a([0, 1, 2, M32] + rand_u32(rng, 4)), u32a([0] * 16)]


def _gray_ref(args):
    a, out = args
    res = []
    for x in uints(a):
        g = x ^ (x >> 1)
        inv, v = 0, g  # inverse Gray code: xor of all right shifts
        while v:
            inv ^= v
            v >>= 1
        res += [g, inv]
    return [a, like(out, res)]


case(
    "gray_code",
    "gray_code.cu",
    G1,
    B(8),
    _gray_args,
    _gray_ref,
    ("bitwise", "shift", "uniform_loop"),
)


# -- byte and halfword loads -------------------------------------------------------------


def _bytes_u8_args(rng):
    data = [0, 255, 128, 1] + [int(v) for v in rng.integers(0, 256, size=12)]
    return [pack_bytes(data), i32a([0] * 8)]


def _bytes_u8_ref(args):
    packed, out = args
    p = unpack_bytes(packed)
    return [packed, like(out, [p[2 * i] + 3 * p[2 * i + 1] for i in range(8)])]


case("bytes_u8", "bytes_u8.cu", G1, B(8), _bytes_u8_args, _bytes_u8_ref, ("byte_load",))


def _bytes_s8_args(rng):
    data = [0x80, 0x7F, 0xFF, 0x01] + [int(v) for v in rng.integers(0, 256, size=20)]
    return [pack_bytes(data), i32a([0] * 8)]


def _bytes_s8_ref(args):
    packed, out = args
    p = [sbyte(b) for b in unpack_bytes(packed)]
    return [packed, like(out, [p[3 * i + 1] - 2 * p[i] for i in range(8)])]


case("bytes_s8", "bytes_s8.cu", G1, B(8), _bytes_s8_args, _bytes_s8_ref, ("byte_load",))


def _shorts_args(rng):
    halves = [0x8000, 0x7FFF, 0xFFFF, 0x0001] + [int(v) for v in rng.integers(0, 65536, size=4)]
    data = []
    for h in halves:
        data += [h & 0xFF, h >> 8]
    return [pack_bytes(data), i32a([0] * 16)]


def _shorts_ref(args):
    packed, out = args
    p = unpack_bytes(packed)
    h = [p[2 * k] | (p[2 * k + 1] << 8) for k in range(8)]
    res = []
    for i in range(8):
        s = h[7 - i]
        res += [h[i], s - 65536 if s & 0x8000 else s]
    return [packed, like(out, res)]


case("shorts", "shorts.cu", G1, B(8), _shorts_args, _shorts_ref, ("short_load", "byte_load"))


def _fnv_args(rng):
    return [pack_bytes([int(v) for v in rng.integers(0, 256, size=24)]), u32a([0] * 4), np.int32(6)]


def _fnv_ref(args):
    packed, out, n = args
    p = unpack_bytes(packed)
    res = []
    for t in range(4):
        h = 2166136261
        for k in range(int(n)):
            h = ((h ^ p[5 * t + k]) * 16777619) & M32
        res.append(h)
    return [packed, like(out, res), n]


case(
    "fnv1a",
    "fnv1a.cu",
    G1,
    B(4),
    _fnv_args,
    _fnv_ref,
    ("byte_load", "wraparound", "uniform_loop", "classic"),
)


# --------------------------------------------------------------------------------------
# thread / block indexing
# --------------------------------------------------------------------------------------


def _ctas(grid):
    gx, gy, gz = grid
    for bz in range(gz):
        for by in range(gy):
            for bx in range(gx):
                yield bx, by, bz


def _threads(block):
    bx, by, bz = block
    for tz in range(bz):
        for ty in range(by):
            for tx in range(bx):
                yield tx, ty, tz


def _idx_1d(grid, block):
    n = grid[0] * block[0]

    def make(rng):
        return [i32a([-1] * n)]

    def ref(args):
        (out,) = args
        res = [0] * n
        for bx in range(grid[0]):
            for tx in range(block[0]):
                res[bx * block[0] + tx] = (grid[0] << 24) | (block[0] << 16) | (bx << 8) | tx
        return [like(out, res)]

    return make, ref


case(
    "idx_1d", "idx_1d.cu", (5, 1, 1), B(3), *_idx_1d((5, 1, 1), (3, 1, 1)), ("idx_1d", "multi_cta")
)
case(
    "idx_1d_wide",
    "idx_1d.cu",
    (2, 1, 1),
    B(16),
    *_idx_1d((2, 1, 1), (16, 1, 1)),
    ("idx_1d", "multi_cta"),
    kernel="idx_1d",
)


case(
    "idx_1d_max_grid",
    "idx_1d.cu",
    (16, 1, 1),
    B(4),
    *_idx_1d((16, 1, 1), (4, 1, 1)),
    ("idx_1d", "multi_cta"),
    kernel="idx_1d",
)


def _idx_2d(grid, block):
    w, h = grid[0] * block[0], grid[1] * block[1]

    def make(rng):
        return [i32a([-1] * (w * h))]

    def ref(args):
        (out,) = args
        res = [0] * (w * h)
        for bx, by, _ in _ctas(grid):
            for tx, ty, _ in _threads(block):
                x, y = bx * block[0] + tx, by * block[1] + ty
                res[y * w + x] = (by << 12) | (bx << 8) | (ty << 4) | tx
        return [like(out, res)]

    return make, ref


case(
    "idx_2d",
    "idx_2d.cu",
    (2, 3, 1),
    B(4, 2),
    *_idx_2d((2, 3, 1), (4, 2, 1)),
    ("idx_2d", "multi_cta"),
)
case(
    "idx_2d_tall",
    "idx_2d.cu",
    (3, 2, 1),
    B(2, 3),
    *_idx_2d((3, 2, 1), (2, 3, 1)),
    ("idx_2d", "multi_cta"),
    kernel="idx_2d",
)


def _idx_3d(grid, block):
    n = block[0] * block[1] * block[2]
    total = n * grid[0] * grid[1] * grid[2]

    def make(rng):
        return [i32a([-1] * total)]

    def ref(args):
        (out,) = args
        res = [0] * total
        for bx, by, bz in _ctas(grid):
            cta = (bz * grid[1] + by) * grid[0] + bx
            for tx, ty, tz in _threads(block):
                t = (tz * block[1] + ty) * block[0] + tx
                res[cta * n + t] = ((((bz * 4 + by) * 4 + bx) * 16 + tz) << 8) | (ty << 4) | tx
        return [like(out, res)]

    return make, ref


case(
    "idx_3d",
    "idx_3d.cu",
    (2, 1, 2),
    B(2, 3, 2),
    *_idx_3d((2, 1, 2), (2, 3, 2)),
    ("idx_3d", "multi_cta"),
)
case(
    "idx_3d_deep",
    "idx_3d.cu",
    (1, 3, 2),
    B(4, 1, 2),
    *_idx_3d((1, 3, 2), (4, 1, 2)),
    ("idx_3d", "multi_cta"),
    kernel="idx_3d",
)


def _grid_dims(grid, block):
    nctas = grid[0] * grid[1] * grid[2]

    def make(rng):
        return [i32a([-1] * (2 * nctas))]

    def ref(args):
        (out,) = args
        bd = (block[2] << 16) | (block[1] << 8) | block[0]
        gd = (grid[2] << 16) | (grid[1] << 8) | grid[0]
        return [like(out, [bd, gd] * nctas)]

    return make, ref


case(
    "grid_dims",
    "grid_dims.cu",
    (2, 1, 2),
    B(3, 2),
    *_grid_dims((2, 1, 2), (3, 2, 1)),
    ("idx_3d", "multi_cta", "early_return"),
)
case(
    "grid_dims_z",
    "grid_dims.cu",
    (1, 3, 1),
    B(1, 2, 4),
    *_grid_dims((1, 3, 1), (1, 2, 4)),
    ("idx_3d", "multi_cta", "early_return"),
    kernel="grid_dims",
)


def _mat2d_args(rng):
    return [
        i32a(rand_i32(rng, 15, -1000, 1000)),
        i32a(rand_i32(rng, 15, -1000, 1000)),
        i32a([7] * 16),
        np.int32(5),
        np.int32(3),
    ]


def _mat2d_ref(args):
    a, b, c, w, h = args
    res = ints(c)
    for k in range(int(w) * int(h)):
        res[k] = int(a[k]) + 2 * int(b[k])
    return [a, b, like(c, res), w, h]


case(
    "mat2d_add",
    "mat2d_add.cu",
    (2, 2, 1),
    B(4, 2),
    _mat2d_args,
    _mat2d_ref,
    ("idx_2d", "multi_cta", "early_return"),
)


# --------------------------------------------------------------------------------------
# control flow
# --------------------------------------------------------------------------------------


def _uniform_loop(n: int):
    def make(rng):
        return [i32a([-1] * 8), np.int32(n)]

    def ref(args):
        out, nn = args
        return [like(out, [sum(k * i + 1 for k in range(int(nn))) for i in range(8)]), nn]

    return make, ref


case("uniform_loop", "uniform_loop.cu", G1, B(8), *_uniform_loop(6), ("uniform_loop",))
case(
    "uniform_loop_zero_trips",
    "uniform_loop.cu",
    G1,
    B(8),
    *_uniform_loop(0),
    ("uniform_loop",),
    kernel="uniform_loop",
)


def _divergent_loop_args(rng):
    trips = [0, 9, 1, 5] + [int(v) for v in rng.integers(0, 10, size=12)]
    return [i32a(trips), i32a([-1] * 16)]


def _divergent_loop_ref(args):
    trips, out = args
    res = [sum(k ^ i for k in range(n)) for i, n in enumerate(ints(trips))]
    return [trips, like(out, res)]


case(
    "divergent_loop",
    "divergent_loop.cu",
    (2, 1, 1),
    B(8),
    _divergent_loop_args,
    _divergent_loop_ref,
    ("divergent_loop", "multi_cta"),
)


def _nested_args(rng):
    rows = [0, 5, 1, 3] + [int(v) for v in rng.integers(0, 6, size=4)]
    return [i32a(rows), i32a([-1] * 8)]


def _nested_ref(args):
    rows, out = args
    res = []
    for i, n in enumerate(ints(rows)):
        res.append(sum((r + 1) * (c + i) for r in range(n) for c in range(r + 1)))
    return [rows, like(out, res)]


case(
    "nested_loop",
    "nested_loop.cu",
    G1,
    B(8),
    _nested_args,
    _nested_ref,
    ("nested_loop", "divergent_loop"),
)


def _branch_args(rng):
    return [i32a(rand_i32(rng, 12, -100, 100)), i32a([0] * 12), i32a([0] * 12)]


def _branch_ref(args):
    a, out, side = args
    res, sd = [], []
    for i, x in enumerate(ints(a)):
        y = [x * 2, x - 5, -x][i % 3]
        sd.append(i % 3 + 1)
        res.append(y + i)
    return [a, like(out, res), like(side, sd)]


case(
    "branch_ifelse",
    "branch_ifelse.cu",
    G1,
    B(12),
    _branch_args,
    _branch_ref,
    ("divergent_if", "div_const"),
)


def _break_args(rng):
    return [i32a([int(v) for v in rng.integers(0, 21, size=16)]), i32a([-1] * 8), np.int32(25)]


def _break_ref(args):
    a, out, limit = args
    xs = ints(a)
    res = []
    for i in range(8):
        s = 0
        for k in range(16):
            v = xs[(i + k) & 15]
            if v & 1:
                continue
            s += v
            if s > int(limit):
                break
        res.append(s)
    return [a, like(out, res), limit]


case(
    "break_continue",
    "break_continue.cu",
    G1,
    B(8),
    _break_args,
    _break_ref,
    ("break_continue", "divergent_loop"),
)


def _early_exit_args(rng):
    a = [-1, 0, 5, -100, 1000, 3, INT_MIN, 7]
    return [i32a(a), i32a([99] * 8), np.int32(4)]


def _early_exit_ref(args):
    a, out, n = args
    res = ints(out)
    for i, x in enumerate(ints(a)):
        if x < 0:
            continue
        s = x
        for k in range(int(n)):
            s = s * 2 + k
        res[i] = s
    return [a, like(out, res), n]


case(
    "early_exit_loop",
    "early_exit_loop.cu",
    (2, 1, 1),
    B(4),
    _early_exit_args,
    _early_exit_ref,
    ("early_return", "uniform_loop", "multi_cta"),
)


def _live_args(rng):
    return [i32a(rand_i32(rng, 6, -1000, 1000)), i32a([0] * 8), np.int32(5)]


def _live_ref(args):
    a, out, n = args
    a0, a1, a2, a3, a4, a5 = ints(a)
    res = []
    for i in range(8):
        s = i
        for k in range(int(n)):
            s = s32(s * 3 + (((a0 * k + a1) ^ a2) - a3 * i + (a4 | k) - a5))
        res.append(s)
    return [a, like(out, res), n]


case(
    "live_values",
    "live_values.cu",
    G1,
    B(8),
    _live_args,
    _live_ref,
    ("uniform_loop", "bitwise", "add_sub_mul", "register_pressure"),
)


def _collatz_args(rng):
    return [u32a([27, 1, 2, 3] + rand_u32(rng, 4, 1, 30)), i32a([-1] * 8)]


def _collatz_steps(x: int) -> int:
    steps = 0
    while x != 1:
        x = 3 * x + 1 if x % 2 else x // 2
        steps += 1
    return steps


def _collatz_ref(args):
    a, out = args
    return [a, like(out, [_collatz_steps(x) for x in uints(a)])]


case(
    "collatz",
    "collatz.cu",
    (2, 1, 1),
    B(4),
    _collatz_args,
    _collatz_ref,
    ("divergent_loop", "classic", "multi_cta", "select"),
)


def _gcd_args(rng):
    a = [12, 0, 17, 100] + rand_u32(rng, 4, 1, 200)
    b = [18, 9, 0, 75] + rand_u32(rng, 4, 1, 200)
    return [u32a(a), u32a(b), u32a([0] * 8)]


def _gcd_ref(args):
    a, b, out = args
    return [a, b, like(out, [math.gcd(x, y) for x, y in zip(uints(a), uints(b), strict=True)])]


case(
    "gcd",
    "gcd.cu",
    G1,
    B(8),
    _gcd_args,
    _gcd_ref,
    ("classic", "div_var", "div_unsigned", "divergent_loop"),
)


def _fib_args(rng):
    return [i32a([0, 1, 2, 10, 30, 47, 48, int(rng.integers(49, 64))]), u32a([0] * 8)]


def _fib_ref(args):
    n, out = args
    res = []
    for k in ints(n):
        f0, f1 = 0, 1
        for _ in range(k):
            f0, f1 = f1, f0 + f1
        res.append(f0)
    return [n, like(out, res)]


case(
    "fib",
    "fib.cu",
    G1,
    B(8),
    _fib_args,
    _fib_ref,
    ("classic", "divergent_loop", "wraparound"),
)


def _isqrt_args(rng):
    return [u32a([0, 1, 3, 4, 99, M32, 0xFFFE0001] + rand_u32(rng, 1)), u32a([0] * 8)]


def _isqrt_ref(args):
    a, out = args
    return [a, like(out, [math.isqrt(x) for x in uints(a)])]


case(
    "isqrt",
    "isqrt.cu",
    G1,
    B(8),
    _isqrt_args,
    _isqrt_ref,
    ("classic", "uniform_loop", "select"),
)


def _digit_args(rng):
    a = [0, 9, -10, INT_MAX, -1000000] + rand_i32(rng, 3, INT_MIN + 1)
    return [i32a(a), i32a([0] * 16)]


def _digit_ref(args):
    a, out = args
    res = []
    for x in ints(a):
        digits = str(abs(x))
        res += [sum(int(c) for c in digits), len(digits)]
    return [a, like(out, res)]


case(
    "digit_sum",
    "digit_sum.cu",
    G1,
    B(8),
    _digit_args,
    _digit_ref,
    ("div_const", "div_signed", "minmax_abs", "divergent_loop"),
)


def _xorshift_args(rng):
    return [u32a(rand_u32(rng, 8, 1)), u32a([0] * 8), np.int32(5)]


def _xorshift_ref(args):
    seed, out, rounds = args
    res = []
    for x in uints(seed):
        for _ in range(int(rounds)):
            x ^= (x << 13) & M32
            x ^= x >> 17
            x ^= (x << 5) & M32
        res.append(x)
    return [seed, like(out, res), rounds]


case(
    "xorshift",
    "xorshift.cu",
    G1,
    B(8),
    _xorshift_args,
    _xorshift_ref,
    ("shift", "bitwise", "uniform_loop", "classic"),
)


def _crc_args(rng):
    return [u32a([0, M32] + rand_u32(rng, 6)), u32a([0] * 8)]


def _crc_ref(args):
    a, out = args
    return [a, like(out, [zlib.crc32(x.to_bytes(4, "little")) for x in uints(a)])]


case(
    "crc32",
    "crc32.cu",
    G1,
    B(8),
    _crc_args,
    _crc_ref,
    ("shift", "bitwise", "uniform_loop", "select", "classic"),
)


def _grid_stride_args(rng):
    return [i32a(rand_i32(rng, 29, -1000, 1000)), i32a([-1] * 29), np.int32(29)]


def _grid_stride_ref(args):
    a, out, n = args
    return [a, like(out, [3 * x - i for i, x in enumerate(ints(a))]), n]


case(
    "grid_stride",
    "grid_stride.cu",
    (2, 1, 1),
    B(4),
    _grid_stride_args,
    _grid_stride_ref,
    ("grid_stride", "multi_cta", "divergent_loop"),
)


def _gs_sum_args(rng):
    return [i32a(rand_i32(rng, 37, -100, 100)), i32a([1000]), np.int32(37)]


def _gs_sum_ref(args):
    a, total, n = args
    return [a, like(total, [int(total[0]) + sum(ints(a))]), n]


case(
    "grid_stride_sum",
    "grid_stride_sum.cu",
    (3, 1, 1),
    B(4),
    _gs_sum_args,
    _gs_sum_ref,
    ("grid_stride", "atomic_add", "atomic_global", "contention", "multi_cta"),
)


def _fill_args(rng):
    return [i32a([42] * 32), np.int32(30), np.int32(-5)]


def _fill_ref(args):
    out, n, value = args
    res = ints(out)
    for i in range(int(n)):
        res[i] = int(value) + i
    return [like(out, res), n, value]


case("fill", "fill.cu", (3, 1, 1), B(4), _fill_args, _fill_ref, ("grid_stride", "multi_cta"))


# --------------------------------------------------------------------------------------
# shared memory and barriers
# --------------------------------------------------------------------------------------


def _shared_reverse_args(rng):
    return [i32a(rand_i32(rng, 16)), i32a([0] * 16)]


def _shared_reverse_ref(args):
    a, out = args
    xs = ints(a)
    return [a, like(out, xs[:8][::-1] + xs[8:][::-1])]


case(
    "shared_reverse",
    "shared_reverse.cu",
    (2, 1, 1),
    B(8),
    _shared_reverse_args,
    _shared_reverse_ref,
    ("shared", "syncthreads", "multi_cta", "classic"),
)


def _reduce_sum_args(rng):
    return [i32a(rand_i32(rng, 32, -1000, 1000)), i32a([0, 0])]


def _reduce_sum_ref(args):
    a, out = args
    xs = ints(a)
    return [a, like(out, [sum(xs[:16]), sum(xs[16:])])]


case(
    "reduce_sum",
    "reduce_sum.cu",
    (2, 1, 1),
    B(16),
    _reduce_sum_args,
    _reduce_sum_ref,
    ("shared", "syncthreads", "tree_reduction", "multi_cta", "classic"),
)


def _reduce_max_args(rng):
    a = rand_i32(rng, 8, -1000, -1) + rand_i32(rng, 8, -1000, 1000) + rand_i32(rng, 8)
    return [i32a(a), i32a([0, 0, 0])]


def _reduce_max_ref(args):
    a, out = args
    xs = ints(a)
    return [a, like(out, [max(xs[8 * c : 8 * c + 8]) for c in range(3)])]


case(
    "reduce_max",
    "reduce_max.cu",
    (3, 1, 1),
    B(8),
    _reduce_max_args,
    _reduce_max_ref,
    ("shared", "syncthreads", "tree_reduction", "minmax_abs", "multi_cta", "classic"),
)


def _transpose_args(rng):
    return [i32a(rand_i32(rng, 16, -1000, 1000)), i32a([0] * 16)]


def _transpose_ref(args):
    a, out = args
    m = np.array(ints(a), dtype=np.int64).reshape(4, 4)
    return [a, like(out, m.T.reshape(-1))]


case(
    "transpose",
    "transpose.cu",
    G1,
    B(4, 4),
    _transpose_args,
    _transpose_ref,
    ("shared", "syncthreads", "transpose", "idx_2d"),
)


def _transpose_rect_args(rng):
    return [i32a(rand_i32(rng, 15, -1000, 1000)), i32a([0] * 15), np.int32(5), np.int32(3)]


def _transpose_rect_ref(args):
    a, out, w, h = args
    m = np.array(ints(a), dtype=np.int64).reshape(int(h), int(w))
    return [a, like(out, m.T.reshape(-1)), w, h]


case(
    "transpose_rect",
    "transpose_rect.cu",
    (2, 2, 1),
    B(4, 2),
    _transpose_rect_args,
    _transpose_rect_ref,
    ("transpose", "idx_2d", "multi_cta", "predicated"),
)


def _scan_args(rng):
    return [i32a(rand_i32(rng, 16, -50, 50)), i32a([0] * 16)]


def _scan_ref(args):
    a, out = args
    return [a, like(out, np.cumsum(np.array(ints(a), dtype=np.int64)))]


case(
    "scan",
    "scan.cu",
    G1,
    B(16),
    _scan_args,
    _scan_ref,
    ("shared", "syncthreads", "scan", "uniform_loop", "classic"),
)


def _sort_args(rng):
    a = rand_i32(rng, 6, -20, 20) + [INT_MAX, INT_MIN]
    a = [a[int(k)] for k in rng.permutation(8)]
    return [i32a(a), i32a([0] * 8)]


def _sort_ref(args):
    a, out = args
    return [a, like(out, sorted(ints(a)))]


case(
    "odd_even_sort",
    "odd_even_sort.cu",
    G1,
    B(8),
    _sort_args,
    _sort_ref,
    ("shared", "syncthreads", "sort", "divergent_if", "classic"),
)
case(
    "bubble_sort",
    "bubble_sort.cu",
    G1,
    B(8),
    _sort_args,
    _sort_ref,
    ("shared", "syncthreads", "sort", "nested_loop", "classic"),
)


def _stencil2d_args(rng):
    return [i32a(rand_i32(rng, 16, -1000, 1000)), i32a([0] * 16)]


def _stencil2d_ref(args):
    a, out = args
    m = ints(a)
    res = []
    for y in range(4):
        for x in range(4):
            s = 4 * m[y * 4 + x]
            for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                if 0 <= x + dx < 4 and 0 <= y + dy < 4:
                    s -= m[(y + dy) * 4 + x + dx]
            res.append(s)
    return [a, like(out, res)]


case(
    "stencil_shared_2d",
    "stencil_shared_2d.cu",
    G1,
    B(4, 4),
    _stencil2d_args,
    _stencil2d_ref,
    ("shared", "syncthreads", "idx_2d", "predicated", "classic"),
)


def _stencil1d_args(rng):
    return [i32a(rand_i32(rng, 11, -1000, 1000)), i32a([0] * 11), np.int32(11)]


def _stencil1d_ref(args):
    a, out, n = args
    xs = ints(a)
    nn = int(n)
    res = [xs[max(i - 1, 0)] + 2 * xs[i] + xs[min(i + 1, nn - 1)] for i in range(nn)]
    return [a, like(out, res), n]


case(
    "stencil_1d",
    "stencil_1d.cu",
    (3, 1, 1),
    B(4),
    _stencil1d_args,
    _stencil1d_ref,
    ("early_return", "multi_cta", "select", "classic"),
)


def _reconv_args(rng):
    return [i32a(rand_i32(rng, 12, -20, 20)), i32a([0] * 12)]


def _reconv_ref(args):
    a, out = args
    s = []
    for t, v in enumerate(ints(a)):
        acc = 0
        for _ in range((t & 3) + 1):
            acc = acc * 3 + v
        s.append(-acc if t & 1 else acc)
    return [a, like(out, [s[(t + 1) % 12] - s[t] for t in range(12)])]


case(
    "reconverge_sync",
    "reconverge_sync.cu",
    G1,
    B(12),
    _reconv_args,
    _reconv_ref,
    ("reconverge_sync", "divergent_loop", "shared", "syncthreads"),
)


def _sync_ifelse_args(rng):
    return [i32a([int(v) for v in rng.integers(0, 32, size=16)]), i32a([0] * 16)]


def _sync_ifelse_ref(args):
    a, out = args
    s = [x - t if x > t else (t - x) * 2 + 1 for t, x in enumerate(ints(a))]
    return [a, like(out, s[::-1])]


case(
    "sync_ifelse",
    "sync_ifelse.cu",
    G1,
    B(16),
    _sync_ifelse_args,
    _sync_ifelse_ref,
    ("reconverge_sync", "divergent_if", "shared", "syncthreads"),
)


# --------------------------------------------------------------------------------------
# atomics
# --------------------------------------------------------------------------------------


def _contention_args(rng):
    return [i32a([7, 0])]


def _contention_ref(args):
    (out,) = args
    grid, block = 4, 16
    return [like(out, [7 + grid * sum(range(1, block + 1)), grid * block])]


case(
    "atomic_contention",
    "atomic_contention.cu",
    (4, 1, 1),
    B(16),
    _contention_args,
    _contention_ref,
    ("atomic_add", "atomic_global", "contention", "multi_cta"),
)


def _atomic_sub_args(rng):
    return [i32a(rand_i32(rng, 8, -100, 100)), i32a([1000]), u32a([10])]


def _atomic_sub_ref(args):
    a, acc, wrap = args
    return [
        a,
        like(acc, [int(acc[0]) - sum(ints(a))]),
        like(wrap, [int(wrap[0]) - sum(range(1, 9))]),
    ]


case(
    "atomic_sub",
    "atomic_sub.cu",
    G1,
    B(8),
    _atomic_sub_args,
    _atomic_sub_ref,
    ("atomic_sub", "atomic_global", "wraparound", "contention"),
)


def _atomic_minmax_args(rng):
    a = [-1, 1, 0] + rand_i32(rng, 13, -(10**6), 10**6)
    return [i32a(a), i32a([INT_MAX]), i32a([INT_MIN]), u32a([M32]), u32a([0])]


def _atomic_minmax_ref(args):
    a, smin, smax, umn, umx = args
    xs = ints(a)
    us = [u32(x) for x in xs]
    return [
        a,
        like(smin, [min(xs)]),
        like(smax, [max(xs)]),
        like(umn, [min(us)]),
        like(umx, [max(us)]),
    ]


case(
    "atomic_minmax",
    "atomic_minmax.cu",
    (2, 1, 1),
    B(8),
    _atomic_minmax_args,
    _atomic_minmax_ref,
    ("atomic_minmax", "atomic_global", "cmp_signed_unsigned", "multi_cta", "contention"),
)


def _atomic_bits_args(rng):
    a = rand_u32(rng, 16)
    for k in range(16):  # keep a few bits set in every value so the AND is not always 0
        a[k] |= 0x00100001
    return [u32a(a), u32a([M32, 0, 0x12345678])]


def _atomic_bits_ref(args):
    a, out = args
    xs = uints(a)
    and_, or_, xor_ = uints(out)
    for x in xs:
        and_ &= x
        or_ |= x
        xor_ ^= x
    return [a, like(out, [and_, or_, xor_])]


case(
    "atomic_bits",
    "atomic_bits.cu",
    G1,
    B(16),
    _atomic_bits_args,
    _atomic_bits_ref,
    ("atomic_bits", "atomic_global", "bitwise", "contention"),
)


def _atomic_exch_args(rng):
    return [i32a([0]), i32a([0]), i32a(rand_i32(rng, 8, -1000, 1000) + [-1] * 8)]


def _atomic_exch_ref(args):
    flag, winners, slots = args
    old = ints(slots)[:8]
    return [like(flag, [1]), like(winners, [1]), like(slots, [t * 10 for t in range(8)] + old)]


case(
    "atomic_exch",
    "atomic_exch.cu",
    G1,
    B(8),
    _atomic_exch_args,
    _atomic_exch_ref,
    ("atomic_exch", "atomic_add", "atomic_global", "contention", "select"),
)


def _atomic_cas_args(rng):
    return [i32a(rand_i32(rng, 8, -100, 100)), i32a([100]), i32a([0]), i32a([0])]


def _atomic_cas_ref(args):
    a, total, claim, wins = args
    ctas = 2
    return [
        a,
        like(total, [int(total[0]) + ctas * sum(ints(a))]),
        like(claim, [7]),
        like(wins, [1]),
    ]


case(
    "atomic_cas",
    "atomic_cas.cu",
    (2, 1, 1),
    B(8),
    _atomic_cas_args,
    _atomic_cas_ref,
    ("atomic_cas", "atomic_add", "atomic_global", "contention", "divergent_loop", "multi_cta"),
)


def _inc_dec(threads: int, inc0: int, dec0: int):
    def make(rng):
        return [u32a([inc0]), u32a([dec0])]

    def ref(args):
        inc, dec = args
        i, d = int(inc[0]), int(dec[0])
        for _ in range(threads):
            i = 0 if i >= 7 else i + 1
            d = 5 if (d == 0 or d > 5) else d - 1
        return [like(inc, [i]), like(dec, [d])]

    return make, ref


case(
    "atomic_inc_dec",
    "atomic_inc_dec.cu",
    G1,
    B(13),
    *_inc_dec(13, 0, 0),
    ("atomic_inc_dec", "atomic_global", "contention"),
)
case(
    "atomic_inc_dec_grid",
    "atomic_inc_dec.cu",
    (3, 1, 1),
    B(16),
    *_inc_dec(48, 3, 9),
    ("atomic_inc_dec", "atomic_global", "contention", "multi_cta"),
    kernel="atomic_inc_dec",
)


def _atomic_shared_args(rng):
    return [i32a(rand_i32(rng, 24, -500, 500)), i32a([0]), i32a([-2000])]


def _atomic_shared_ref(args):
    a, total, mx = args
    xs = ints(a)
    best = int(mx[0])
    for c in range(3):
        best = max(best, max([-1000] + xs[8 * c : 8 * c + 8]))
    return [a, like(total, [int(total[0]) + sum(xs)]), like(mx, [best])]


case(
    "atomic_shared",
    "atomic_shared.cu",
    (3, 1, 1),
    B(8),
    _atomic_shared_args,
    _atomic_shared_ref,
    (
        "atomic_shared",
        "atomic_add",
        "atomic_minmax",
        "atomic_global",
        "shared",
        "syncthreads",
        "multi_cta",
    ),
)


def _histogram_args(rng):
    return [i32a(rand_i32(rng, 21, 0, 1000)), i32a([0] * 8), np.int32(21)]


def _histogram_ref(args):
    a, hist, n = args
    h = ints(hist)
    for x in ints(a)[: int(n)]:
        h[x & 7] += 1
    return [a, like(hist, h), n]


case(
    "histogram",
    "histogram.cu",
    (3, 1, 1),
    B(8),
    _histogram_args,
    _histogram_ref,
    ("histogram", "atomic_add", "atomic_global", "contention", "multi_cta", "classic"),
)


def _shared_hist_args(rng):
    return [u32a(rand_u32(rng, 32)), i32a([int(v) for v in rng.integers(0, 5, size=8)])]


def _shared_hist_ref(args):
    a, hist = args
    h = ints(hist)
    for x in uints(a):
        h[x >> 29] += 1
    return [a, like(hist, h)]


case(
    "shared_hist",
    "shared_hist.cu",
    (2, 1, 1),
    B(16),
    _shared_hist_args,
    _shared_hist_ref,
    ("histogram", "atomic_shared", "atomic_add", "shared", "syncthreads", "contention"),
)


def _argmax_args(rng):
    return [i32a(rand_i32(rng, 16, 0, 1000)), u32a([0])]


def _argmax_ref(args):
    a, best = args
    return [a, like(best, [max((x << 8) | i for i, x in enumerate(ints(a)))])]


case(
    "argmax_atomic",
    "argmax_atomic.cu",
    (4, 1, 1),
    B(4),
    _argmax_args,
    _argmax_ref,
    ("atomic_minmax", "atomic_global", "contention", "multi_cta", "classic"),
)


def _ticket_args(rng):
    return [i32a([2]), i32a([0] * 2 + [0] * 24 + [9] * 2)]


def _ticket_ref(args):
    nxt, slots = args
    start, threads = int(nxt[0]), 3 * 8
    res = ints(slots)
    res[start : start + threads] = [1] * threads
    return [like(nxt, [start + threads]), like(slots, res)]


case(
    "atomic_ticket",
    "atomic_ticket.cu",
    (3, 1, 1),
    B(8),
    _ticket_args,
    _ticket_ref,
    ("atomic_add", "atomic_global", "contention", "multi_cta", "gather_scatter"),
)


def _count_if_args(rng):
    return [i32a([-5, 7, -6, 8] + rand_i32(rng, 12, -20, 20)), i32a([0]), np.int32(-5), np.int32(7)]


def _count_if_ref(args):
    a, count, lo, hi = args
    c = sum(1 for x in ints(a) if int(lo) <= x <= int(hi))
    return [a, like(count, [int(count[0]) + c]), lo, hi]


case(
    "count_if",
    "count_if.cu",
    (2, 1, 1),
    B(8),
    _count_if_args,
    _count_if_ref,
    ("atomic_add", "atomic_global", "contention", "predicated", "multi_cta"),
)


def _popcount_array_args(rng):
    return [u32a(rand_u32(rng, 21)), i32a([3])]


def _popcount_array_ref(args):
    a, total = args
    return [a, like(total, [int(total[0]) + sum(bin(x).count("1") for x in uints(a))])]


def _popcount_array_make(rng):
    a, total = _popcount_array_args(rng)
    return [a, total, np.int32(21)]


case(
    "popcount_array",
    "popcount_array.cu",
    (2, 1, 1),
    B(4),
    _popcount_array_make,
    lambda args: _popcount_array_ref(args[:2]) + [args[2]],
    ("popc", "grid_stride", "atomic_shared", "atomic_add", "shared", "syncthreads", "classic"),
)


# --------------------------------------------------------------------------------------
# warp-level operations (4-thread CTAs, or width 4)
# --------------------------------------------------------------------------------------


def _shfl(vals: list[int], mode: str, b, width: int = 32) -> list[int]:
    """CUDA __shfl_*_sync on the threads of one warp (len(vals) <= 32), all active.

    `b` is the delta / lane mask / source lane, an int or a per-lane list.
    """
    out = []
    for lane in range(len(vals)):
        bb = b[lane] if isinstance(b, list) else b
        base = lane - lane % width
        if mode == "up":
            src = lane - bb
            src = src if src >= base else lane
        elif mode == "down":
            src = lane + bb
            src = src if src < base + width else lane
        elif mode == "xor":
            src = lane ^ bb
            src = src if src < base + width else lane
        else:  # idx
            src = base + (bb % width)
        out.append(vals[src])
    return out


def _shfl_down_args(rng):
    return [i32a(rand_i32(rng, 16, -1000, 1000)), i32a([0] * 16)]


def _shfl_down_ref(args):
    a, out = args
    v = ints(a)
    v = [x + y for x, y in zip(v, _shfl(v, "down", 2, 4), strict=True)]
    v = [x + y for x, y in zip(v, _shfl(v, "down", 1, 4), strict=True)]
    return [a, like(out, v)]


case(
    "shfl_down",
    "shfl_down.cu",
    G1,
    B(16),
    _shfl_down_args,
    _shfl_down_ref,
    ("shfl_down", "shfl_width", "warp_edges"),
)


def _shfl_up_ref(args):
    a, out = args
    v = ints(a)
    for d in (1, 2):
        n = _shfl(v, "up", d, 4)
        v = [x + (y if (t & 3) >= d else 0) for t, (x, y) in enumerate(zip(v, n, strict=True))]
    return [a, like(out, v)]


case(
    "shfl_up",
    "shfl_up.cu",
    G1,
    B(16),
    _shfl_down_args,
    _shfl_up_ref,
    ("shfl_up", "shfl_width", "scan", "predicated"),
)


def _shfl_xor_ref(args):
    a, out = args
    m = ints(a)
    s = list(m)
    for mask in (1, 2):
        m = [max(x, y) for x, y in zip(m, _shfl(m, "xor", mask, 4), strict=True)]
        s = [x + y for x, y in zip(s, _shfl(s, "xor", mask, 4), strict=True)]
    res = []
    for x, y in zip(m, s, strict=True):
        res += [x, y]
    return [a, like(out, res)]


def _shfl_xor_args(rng):
    return [i32a(rand_i32(rng, 16, -1000, 1000)), i32a([0] * 32)]


case(
    "shfl_xor",
    "shfl_xor.cu",
    G1,
    B(16),
    _shfl_xor_args,
    _shfl_xor_ref,
    ("shfl_xor", "shfl_width", "minmax_abs"),
)


def _shfl_idx_args(rng):
    src = [0, 3, 4, 7, -1, -4, 31, 2] + rand_i32(rng, 8, -40, 40)
    return [i32a(rand_i32(rng, 16, -1000, 1000)), i32a(src), i32a([0] * 32)]


def _shfl_idx_ref(args):
    a, src, out = args
    v = ints(a)
    c = _shfl(v, "idx", 2, 4)
    d = _shfl(v, "idx", ints(src), 4)  # Python % keeps negative sources in [0, 4)
    res = []
    for x, y in zip(c, d, strict=True):
        res += [x, y]
    return [a, src, like(out, res)]


case(
    "shfl_idx",
    "shfl_idx.cu",
    G1,
    B(16),
    _shfl_idx_args,
    _shfl_idx_ref,
    ("shfl_idx", "shfl_width"),
)


def _shfl_edges_args(rng):
    return [i32a(rand_i32(rng, 8, -1000, 1000)), i32a([0] * 32)]


def _shfl_edges_ref(args):
    a, out = args
    v = ints(a)
    res = [0] * 32
    for c in range(2):
        w = v[4 * c : 4 * c + 4]
        up3 = _shfl(w, "up", 3)
        down3 = _shfl(w, "down", 3, 4)
        up1 = _shfl(w, "up", 1)
        rot = _shfl(w, "idx", [(t + 1) & 3 for t in range(4)])
        for t in range(4):
            res[c * 16 + 4 * t : c * 16 + 4 * t + 4] = [up3[t], down3[t], up1[t], rot[t]]
    return [a, like(out, res)]


case(
    "shfl_edges",
    "shfl_edges.cu",
    (2, 1, 1),
    B(4),
    _shfl_edges_args,
    _shfl_edges_ref,
    ("shfl_up", "shfl_down", "shfl_idx", "warp_edges", "multi_cta"),
)


def _shfl_width2_args(rng):
    return [i32a(rand_i32(rng, 8, -1000, 1000)), i32a([0] * 24)]


def _shfl_width2_ref(args):
    a, out = args
    v = ints(a)
    x, d, u = _shfl(v, "xor", 1, 2), _shfl(v, "down", 1, 2), _shfl(v, "up", 1, 2)
    res = []
    for t in range(8):
        res += [x[t], d[t], u[t]]
    return [a, like(out, res)]


case(
    "shfl_width2",
    "shfl_width2.cu",
    G1,
    B(8),
    _shfl_width2_args,
    _shfl_width2_ref,
    ("shfl_xor", "shfl_down", "shfl_up", "shfl_width", "warp_edges"),
)


def _ballot_args(rng):
    a = [1, 2, 3, 4] + [0, -1, -5, 0] + [int(v) for v in rng.integers(-3, 4, size=4)]
    return [i32a(a), u32a([0] * 24)]


def _ballot_ref(args):
    a, out = args
    xs = ints(a)
    res = []
    for c in range(3):
        b = sum(1 << t for t in range(4) if xs[4 * c + t] > 0)
        res += [b, bin(b).count("1")] * 4
    return [a, like(out, res)]


case(
    "ballot",
    "ballot.cu",
    (3, 1, 1),
    B(4),
    _ballot_args,
    _ballot_ref,
    ("ballot", "popc", "multi_cta"),
)


def _any_all_args(rng):
    a = [6, 7, 8, 9] + [0, -1, -2, -3] + [1, 2, 3, 4] + [6, 0, 2, 3]
    return [i32a(a), i32a([0] * 16)]


def _any_all_ref(args):
    a, out = args
    xs = ints(a)
    res = []
    for c in range(4):
        w = xs[4 * c : 4 * c + 4]
        v = (1 if any(x > 5 for x in w) else 0) | (2 if all(x > 0 for x in w) else 0)
        res += [v] * 4
    return [a, like(out, res)]


case(
    "any_all",
    "any_all.cu",
    (4, 1, 1),
    B(4),
    _any_all_args,
    _any_all_ref,
    ("any_all", "multi_cta"),
)


def _laneid_args(rng):
    return [i32a([-1] * 12)]


def _laneid_ref(args):
    (out,) = args
    return [like(out, [(t % 4) * 16 + t % 4 for t in range(12)])]


case(
    "laneid",
    "laneid.cu",
    (3, 1, 1),
    B(4),
    _laneid_args,
    _laneid_ref,
    ("laneid", "inline_asm", "multi_cta"),
)


def _compact_args(rng):
    a = [2, 3, 4, 6] + [int(v) for v in rng.integers(-50, 50, size=4)]
    return [i32a(a), i32a([-1] * 8), i32a([-1, -1])]


def _compact_ref(args):
    a, out, count = args
    xs = ints(a)
    res = ints(out)
    cnt = []
    for c in range(2):
        kept = [x for x in xs[4 * c : 4 * c + 4] if x % 2 == 0]
        res[4 * c : 4 * c + len(kept)] = kept
        cnt.append(len(kept))
    return [a, like(out, res), like(count, cnt)]


case(
    "warp_compact",
    "warp_compact.cu",
    (2, 1, 1),
    B(4),
    _compact_args,
    _compact_ref,
    ("ballot", "popc", "divergent_if", "multi_cta", "classic"),
)


def _vote_div_args(rng):
    a = [0, 7, 3, 5] + [int(v) for v in rng.integers(0, 16, size=4)]
    return [i32a(a), i32a([0] * 8)]


def _vote_div_ref(args):
    a, out = args
    xs = ints(a)
    res = []
    for c in range(2):
        s = [sum(range(x & 7)) for x in xs[4 * c : 4 * c + 4]]
        b = sum(1 << t for t in range(4) if s[t] > 6)
        al = 1 if all(v < 15 for v in s) else 0
        res += [(b << 8) | (al << 5) | v for v in s]
    return [a, like(out, res)]


case(
    "vote_divergent",
    "vote_divergent.cu",
    (2, 1, 1),
    B(4),
    _vote_div_args,
    _vote_div_ref,
    ("ballot", "any_all", "divergent_loop", "multi_cta"),
)


# --------------------------------------------------------------------------------------
# classic small kernels
# --------------------------------------------------------------------------------------


def _dot_fixed(rng):
    return [i32a([1, 2, 3]), i32a([4, 5, 6]), i32a([0]), np.int32(3)]


def _dot_random(rng):
    return [
        i32a(rand_i32(rng, 10, -1000, 1000)),
        i32a(rand_i32(rng, 10, -1000, 1000)),
        i32a([123]),
        np.int32(10),
    ]


def _dot_ref(args):
    a, b, out, n = args
    s = sum(x * y for x, y in zip(ints(a)[: int(n)], ints(b)[: int(n)], strict=True))
    return [a, b, like(out, [s]), n]


case("dot", "dot.cu", G1, B(1), _dot_fixed, _dot_ref, ("dot", "classic", "uniform_loop"))
case(
    "dot_random",
    "dot.cu",
    (2, 1, 1),
    B(4),
    _dot_random,
    _dot_ref,
    ("dot", "classic", "uniform_loop", "early_return", "multi_cta"),
    kernel="dot",
)


def _dot_atomic_args(rng):
    return [
        i32a(rand_i32(rng, 19, -100, 100)),
        i32a(rand_i32(rng, 19, -100, 100)),
        i32a([0]),
        np.int32(19),
    ]


def _dot_atomic_ref(args):
    a, b, out, n = args
    s = int(out[0]) + sum(x * y for x, y in zip(ints(a), ints(b), strict=True))
    return [a, b, like(out, [s]), n]


case(
    "dot_atomic",
    "dot_atomic.cu",
    (2, 1, 1),
    B(4),
    _dot_atomic_args,
    _dot_atomic_ref,
    ("dot", "classic", "grid_stride", "atomic_add", "atomic_global", "multi_cta"),
)


def _matmul(n: int):
    def make(rng):
        return [
            i32a(rand_i32(rng, n * n, -20, 20)),
            i32a(rand_i32(rng, n * n, -20, 20)),
            i32a([0] * (n * n)),
        ]

    def ref(args):
        a, b, c = args
        ma = np.array(ints(a), dtype=np.int64).reshape(n, n)
        mb = np.array(ints(b), dtype=np.int64).reshape(n, n)
        return [a, b, like(c, (ma @ mb).reshape(-1))]

    return make, ref


case("matmul3", "matmul3.cu", G1, B(3, 3), *_matmul(3), ("matmul", "classic", "idx_2d"))
case(
    "matmul4",
    "matmul4.cu",
    G1,
    B(4, 4),
    *_matmul(4),
    ("matmul", "classic", "idx_2d", "uniform_loop"),
)


def _matvec_args(rng):
    return [
        i32a(rand_i32(rng, 30, -50, 50)),
        i32a(rand_i32(rng, 5, -50, 50)),
        i32a([-1] * 6),
        np.int32(6),
        np.int32(5),
    ]


def _matvec_ref(args):
    m, x, y, rows, cols = args
    mm = np.array(ints(m), dtype=np.int64).reshape(int(rows), int(cols))
    return [m, x, like(y, mm @ np.array(ints(x), dtype=np.int64)), rows, cols]


case(
    "matvec",
    "matvec.cu",
    (2, 1, 1),
    B(4),
    _matvec_args,
    _matvec_ref,
    ("matmul", "classic", "early_return", "uniform_loop", "multi_cta"),
)


def _reverse_args(n: int):
    def make(rng):
        return [i32a(rand_i32(rng, n)), np.int32(n)]

    return make


def _reverse_ref(args):
    a, n = args
    return [like(a, ints(a)[::-1]), n]


case(
    "reverse_inplace",
    "reverse_inplace.cu",
    (2, 1, 1),
    B(4),
    _reverse_args(13),
    _reverse_ref,
    ("classic", "predicated", "div_const", "multi_cta"),
)
case(
    "reverse_inplace_even",
    "reverse_inplace.cu",
    G1,
    B(8),
    _reverse_args(16),
    _reverse_ref,
    ("classic", "predicated", "div_const"),
    kernel="reverse_inplace",
)


def _gather_args(rng):
    return [
        i32a(rand_i32(rng, 8, -1000, 1000)),
        i32a([int(v) for v in rng.integers(0, 8, size=8)]),
        i32a([int(v) for v in rng.permutation(8)]),
        i32a([0] * 8),
        i32a([0] * 8),
    ]


def _gather_ref(args):
    a, idx, perm, g, s = args
    xs = ints(a)
    sc = [0] * 8
    for i, p in enumerate(ints(perm)):
        sc[p] = xs[i]
    return [a, idx, perm, like(g, [xs[k] for k in ints(idx)]), like(s, sc)]


case(
    "gather_scatter",
    "gather_scatter.cu",
    G1,
    B(8),
    _gather_args,
    _gather_ref,
    ("gather_scatter", "classic"),
)


def _bsearch_args(rng):
    data = sorted(rand_i32(rng, 10, -50, 50) + [3, 3])
    keys = [data[0] - 1, data[-1] + 1, 3, data[5]] + rand_i32(rng, 4, -60, 60)
    return [i32a(data), np.int32(12), i32a(keys), i32a([-1] * 8)]


def _bsearch_ref(args):
    data, n, keys, out = args
    d = ints(data)[: int(n)]
    return [data, n, keys, like(out, [bisect.bisect_left(d, k) for k in ints(keys)])]


case(
    "binary_search",
    "binary_search.cu",
    G1,
    B(8),
    _bsearch_args,
    _bsearch_ref,
    ("classic", "divergent_loop", "select"),
)


def _lut_args(rng):
    return [i32a(rand_i32(rng, 8, -1000, 1000)), i32a([0] * 8)]


def _lut_ref(args):
    a, out = args
    lut = [3, 1, 4, 1, 5, 9, 2, 6]
    return [a, like(out, [lut[x & 7] * 10 + lut[i] for i, x in enumerate(ints(a))])]


case(
    "constant_lut",
    "constant_lut.cu",
    G1,
    B(8),
    _lut_args,
    _lut_ref,
    ("constant_memory", "gather_scatter"),
)


def _shared_rotate_args(rng):
    return [i32a(rand_i32(rng, 4, -1000, 1000)), i32a([0] * 4)]


def _shared_rotate_ref(args):
    a, out = args
    xs = ints(a)
    return [a, like(out, [3 * xs[(t + 1) % 4] - t for t in range(4)])]


case(
    "shared_rotate",
    "shared_rotate.cu",
    G1,
    B(4),
    _shared_rotate_args,
    _shared_rotate_ref,
    ("shared", "syncthreads"),
)


def _vote_small_args(rng):
    return [i32a([3, 0, 7, -2]), u32a([0] * 4)]


def _vote_small_ref(args):
    a, out = args
    xs = ints(a)
    mask = sum(1 << t for t in range(4) if xs[t] > 0)
    word = mask | (int(any(x > 5 for x in xs)) << 4) | (int(all(x != 0 for x in xs)) << 5)
    return [a, like(out, [word] * 4)]


case(
    "vote_small",
    "vote_small.cu",
    G1,
    B(4),
    _vote_small_args,
    _vote_small_ref,
    ("ballot", "any_all"),
)


def _cas_own_args(rng):
    words = [int(v) for v in rng.integers(0, 50, size=4)]
    expect = [words[0], words[1] + 1, words[2], 0xFFFFFFFF]
    return [u32a(words), u32a(expect), u32a([0] * 4)]


def _cas_own_ref(args):
    words, expect, old = args
    w, e = ints(words), ints(expect)
    new = [1000 + t if w[t] == e[t] else w[t] for t in range(4)]
    return [like(words, new), expect, like(old, w)]


case(
    "cas_own",
    "cas_own.cu",
    G1,
    B(4),
    _cas_own_args,
    _cas_own_ref,
    ("atomic_cas", "atomic_global"),
)


def _dims_small_ref(args):
    (out,) = args
    words = [0] * 8
    for z in range(2):  # blockIdx.z
        for y in range(2):
            for x in range(2):
                words[x + 2 * y + 4 * z] = y | z << 4 | 2 << 8 | 2 << 12
    return [like(out, words)]


case(
    "dims_small",
    "dims_small.cu",
    (1, 1, 2),
    B(2, 2),
    lambda rng: [u32a([0] * 8)],
    _dims_small_ref,
    ("idx_3d", "multi_cta"),
)


def _guarded_store_ref(args):
    flags, out = args
    old = ints(out)
    return [flags, like(out, [100 + t if f else old[t] for t, f in enumerate(ints(flags))])]


case(
    "guarded_store",
    "guarded_store.cu",
    G1,
    B(4),
    lambda rng: [u32a([0, 1, 1, 0]), u32a([7, 7, 7, 7])],
    _guarded_store_ref,
    ("predicated", "inline_asm"),
)


def _narrow_stores_ref(args):
    a, out8, out16 = args
    xs = uints(a)
    b8 = [(x * 17 + 1) & 0xFF for x in xs]
    b16 = [(x * 1000 + 3) & 0xFFFF for x in xs]
    words8 = [sum(b8[4 * w + k] << (8 * k) for k in range(4)) for w in range(2)]
    words16 = [b16[2 * w] | b16[2 * w + 1] << 16 for w in range(4)]
    return [a, like(out8, words8), like(out16, words16)]


case(
    "narrow_stores",
    "narrow_stores.cu",
    G1,
    B(8),
    lambda rng: [u32a(rng.integers(0, 2**32, size=8)), u32a([0] * 2), u32a([0] * 4)],
    _narrow_stores_ref,
    ("byte_store", "short_store"),
)
