"""Differential fuzzing: random C integer expressions, compiled by NVRTC, lowered and run on
the interpreter, against an independent Python evaluation of C's 32-bit semantics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qwengpu

MASK = 0xFFFFFFFF
INT_MIN = 0x80000000
THREADS = 16  # one CTA of four warps: every lane gets its own inputs


def signed(v: int) -> int:
    return v - (1 << 32) if v & INT_MIN else v


@dataclass(frozen=True)
class Expr:
    c: str  # C source of an unsigned expression
    value: Callable[[int, int], int]  # the same expression on Python ints (u32 in, u32 out)
    divisions: int = 0


def udiv(a: int, b: int) -> int:
    return a // b if b else a


def umod(a: int, b: int) -> int:
    return a % b if b else a


def sdiv(a: int, b: int) -> int:
    sa, sb = signed(a), signed(b)
    if sb == 0 or (sa == -(2**31) and sb == -1):
        return a
    q = abs(sa) // abs(sb)
    return (q if (sa < 0) == (sb < 0) else -q) & MASK


def srem(a: int, b: int) -> int:
    sa, sb = signed(a), signed(b)
    if sb == 0 or (sa == -(2**31) and sb == -1):
        return a
    return (sa - signed(sdiv(a, b)) * sb) & MASK


BINARY: list[tuple[str, Callable[[int, int], int], int]] = [
    ("({a} + {b})", lambda a, b: (a + b) & MASK, 0),
    ("({a} - {b})", lambda a, b: (a - b) & MASK, 0),
    ("({a} * {b})", lambda a, b: (a * b) & MASK, 0),
    ("({a} & {b})", lambda a, b: a & b, 0),
    ("({a} | {b})", lambda a, b: a | b, 0),
    ("({a} ^ {b})", lambda a, b: a ^ b, 0),
    ("({a} << ({b} & 31u))", lambda a, b: (a << (b & 31)) & MASK, 0),
    ("({a} >> ({b} & 31u))", lambda a, b: a >> (b & 31), 0),
    ("(unsigned)((int){a} >> ({b} & 31u))", lambda a, b: (signed(a) >> (b & 31)) & MASK, 0),
    ("(unsigned)({a} < {b})", lambda a, b: int(a < b), 0),
    ("(unsigned)((int){a} < (int){b})", lambda a, b: int(signed(a) < signed(b)), 0),
    ("(unsigned)({a} == {b})", lambda a, b: int(a == b), 0),
    ("({a} > {b} ? {a} : {b})", lambda a, b: max(a, b), 0),
    ("(unsigned)min((int){a}, (int){b})", lambda a, b: min(signed(a), signed(b)) & MASK, 0),
    ("__umulhi({a}, {b})", lambda a, b: (a * b) >> 32, 0),
    (
        "(unsigned)__mulhi((int){a}, (int){b})",
        lambda a, b: ((signed(a) * signed(b)) >> 32) & MASK,
        0,
    ),
    ("udiv_({a}, {b})", udiv, 1),
    ("umod_({a}, {b})", umod, 1),
    ("sdiv_({a}, {b})", sdiv, 1),
    ("srem_({a}, {b})", srem, 1),
]
UNARY: list[tuple[str, Callable[[int], int]]] = [
    ("(~{a})", lambda a: ~a & MASK),
    ("(0u - {a})", lambda a: -a & MASK),
    ("(unsigned)__popc({a})", lambda a: bin(a).count("1")),
    ("(unsigned)__clz({a})", lambda a: 32 - a.bit_length()),
    ("__brev({a})", lambda a: int(f"{a:032b}"[::-1], 2)),
    ("(unsigned)abs((int){a})", lambda a: abs(signed(a)) & MASK),
    ("({a} / 7u)", lambda a: a // 7),
    ("(unsigned)((int){a} % 5)", lambda a: srem(a, 5)),
]
PRELUDE = """
__device__ __forceinline__ unsigned udiv_(unsigned a, unsigned b) { return b ? a / b : a; }
__device__ __forceinline__ unsigned umod_(unsigned a, unsigned b) { return b ? a % b : a; }
__device__ __forceinline__ unsigned sdiv_(unsigned a, unsigned b) {
    int x = (int)a, y = (int)b;
    return (y == 0 || (x == (int)0x80000000 && y == -1)) ? a : (unsigned)(x / y);
}
__device__ __forceinline__ unsigned srem_(unsigned a, unsigned b) {
    int x = (int)a, y = (int)b;
    return (y == 0 || (x == (int)0x80000000 && y == -1)) ? a : (unsigned)(x % y);
}
"""

LEAVES = st.sampled_from(
    [
        Expr("x", lambda x, y: x),
        Expr("y", lambda x, y: y),
        Expr("3u", lambda x, y: 3),
        Expr("0xFFFFFFFFu", lambda x, y: MASK),
        Expr("0x80000000u", lambda x, y: INT_MIN),
    ]
)


def combine(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def binary(op: tuple[str, Callable[[int, int], int], int], a: Expr, b: Expr) -> Expr:
        text, fn, div = op
        return Expr(
            text.format(a=a.c, b=b.c),
            lambda x, y: fn(a.value(x, y), b.value(x, y)),
            a.divisions + b.divisions + div,
        )

    def unary(op: tuple[str, Callable[[int], int]], a: Expr) -> Expr:
        text, fn = op
        return Expr(text.format(a=a.c), lambda x, y: fn(a.value(x, y)), a.divisions)

    return st.one_of(
        st.builds(binary, st.sampled_from(BINARY), children, children),
        st.builds(unary, st.sampled_from(UNARY), children),
    )


EXPRESSIONS = st.recursive(LEAVES, combine, max_leaves=6).filter(lambda e: e.divisions <= 1)
SPECIAL = [0, 1, 2, 31, 32, 33, 0x7FFFFFFF, INT_MIN, 0x80000001, MASK, MASK - 1]
WORDS = st.one_of(st.sampled_from(SPECIAL), st.integers(0, MASK))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRESSIONS, st.lists(st.tuples(WORDS, WORDS), min_size=THREADS, max_size=THREADS))
def test_random_expression_matches_c_semantics(expr: Expr, inputs: list[tuple[int, int]]) -> None:
    source = (
        PRELUDE
        + 'extern "C" __global__ void fuzz(const unsigned* xs, const unsigned* ys, unsigned* out)'
        + " {\n    unsigned x = xs[threadIdx.x], y = ys[threadIdx.x];\n"
        + f"    out[threadIdx.x] = {expr.c};\n}}\n"
    )
    xs = np.array([x for x, _ in inputs], np.uint32)
    ys = np.array([y for _, y in inputs], np.uint32)
    out = np.zeros(THREADS, np.uint32)
    qwengpu.RawKernel(source, "fuzz")(1, THREADS, [xs, ys, out])
    expected = [expr.value(int(x), int(y)) for x, y in inputs]
    assert out.tolist() == expected, f"{expr.c}\n{source}"
