"""Each calculator operation as a launch of a ready kernel (kernels.cu): its grid, block and
arguments, and how its result is read back. The host only lays words out here (numpy's
broadcasting copies a scalar into every element, a matrix goes in transposed for `@`) and
reads them back; every value is computed by the kernel on the machine."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qwengpu.chat.expr import CalcError
from qwengpu.isa.instr import Program
from qwengpu.isa.spec import MachineSpec

KERNELS = Path(__file__).with_name("kernels.cu")

# the bits of a kernel's err word (kernels.cu)
ERR_OVERFLOW = 1
ERR_ZERO_DIVISION = 2
ERR_NEGATIVE = 4
NEGATIVE_MESSAGES = {
    "pow": "a negative exponent (integers only)",
    "factorial": "the factorial of a negative number",
    "fib": "a negative Fibonacci index",
    "isqrt": "the square root of a negative number",
}


@dataclass
class Launch:
    """One kernel launch and where its result lies afterwards."""

    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: list  # in the kernel's parameter order: int32 arrays and np.int32 scalars
    read: Callable[[], np.ndarray]  # the result, from `args` after the launch
    err: np.ndarray | None = None  # the kernel's err word, if it has one


@functools.cache
def _ptx() -> str:
    from qwengpu.cuda import compile_cuda

    return compile_cuda(KERNELS.read_text(), filename=KERNELS.name).ptx


@functools.cache
def program(kernel: str, spec: MachineSpec) -> Program:
    """A ready kernel lowered for a machine (NVRTC runs once per process)."""
    from qwengpu.api import lower_ptx

    return lower_ptx(_ptx(), kernel, spec=spec)


def plan(name: str, text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
    """The launch that computes operation `name` (source `text`) of `operands`."""
    for operand in operands:
        if operand.size == 0:
            raise CalcError(f"'{text}': an operand is an empty list")
    if name in ELEMENTWISE:
        return _elementwise(name, text, operands, spec)
    if name in UNARY:
        return _unary(name, text, operands[0], spec)
    return PLANS[name](text, operands, spec)


ELEMENTWISE = {"add", "sub", "mul", "floordiv", "mod", "pow", "gcd", "lcm"}
UNARY = {"neg", "abs", "popcount", "factorial", "fib", "isqrt"}


def _zeros(count: int) -> np.ndarray:
    return np.zeros(max(count, 1), np.int32)


def _threads(count: int, text: str, spec: MachineSpec) -> tuple[tuple[int], tuple[int]]:
    """One thread per element: CTAs of the machine's width, at most max_grid_ctas."""
    block = min(count, spec.threads_per_cta)
    grid = -(-count // block)
    if grid > spec.max_grid_ctas:
        most = spec.max_grid_ctas * spec.threads_per_cta
        raise CalcError(f"'{text}': {count} elements; the machine runs at most {most} per launch")
    return (grid,), (block,)


def _elementwise(name: str, text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
    a, b = operands
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise CalcError(f"'{text}': shapes {a.shape} and {b.shape} do not broadcast") from None
    count = math.prod(shape)
    left, right = (np.broadcast_to(x, shape).astype(np.int32).ravel() for x in (a, b))
    out, err = _zeros(count), _zeros(1)
    grid, block = _threads(count, text, spec)
    args = [left, right, out, np.int32(count), err]
    return Launch(f"calc_{name}", grid, block, args, lambda: out.reshape(shape), err)


def _unary(name: str, text: str, a: np.ndarray, spec: MachineSpec) -> Launch:
    count = a.size
    out, err = _zeros(count), _zeros(1)
    grid, block = _threads(count, text, spec)
    args = [a.astype(np.int32).ravel(), out, np.int32(count), err]
    return Launch(f"calc_{name}", grid, block, args, lambda: out.reshape(a.shape), err)


def _isprime(text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
    (a,) = operands
    if a.size > spec.max_grid_ctas:
        raise CalcError(f"'{text}': at most {spec.max_grid_ctas} numbers per isprime launch")
    out = _zeros(a.size)
    args = [a.astype(np.int32).ravel(), out]
    return Launch("calc_isprime", (a.size,), (spec.lanes,), args, lambda: out.reshape(a.shape))


def _reduction(name: str) -> Callable[[str, list[np.ndarray], MachineSpec], Launch]:
    """sum/max/min of one array (all of it, as numpy's), or of several numbers (as
    Python's max(a, b)): the numbers are laid out as one vector."""

    def make(text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
        if len(operands) > 1 and any(x.ndim for x in operands):
            raise CalcError(f"'{text}': {name}(a, b, ...) takes numbers; {name}(list) a list")
        values = np.concatenate([x.astype(np.int32).ravel() for x in operands])
        out = _zeros(1)
        args = [values, np.int32(values.size), out]
        err = None
        if name == "sum":
            err = _zeros(1)
            args.append(err)
        return Launch(f"calc_{name}", (1,), (spec.lanes,), args, lambda: out[:1].reshape(()), err)

    return make


def _vector(text: str, a: np.ndarray, name: str) -> np.ndarray:
    if a.ndim != 1:
        raise CalcError(f"'{text}': {name} takes a list (a vector), not {_what(a)}")
    return a.astype(np.int32)


def _what(a: np.ndarray) -> str:
    return "a number" if a.ndim == 0 else f"a {a.shape[0]}x{a.shape[1]} matrix"


def _rearrange(name: str) -> Callable[[str, list[np.ndarray], MachineSpec], Launch]:
    def make(text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
        a = _vector(text, operands[0], name)
        out = _zeros(a.size)
        return Launch(f"calc_{name}", (1,), (spec.lanes,), [a, out, np.int32(a.size)], lambda: out)

    return make


def _cumsum(text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
    a = operands[0].astype(np.int32).ravel()  # numpy's cumsum flattens a matrix
    out, err = _zeros(a.size), _zeros(1)
    args = [a, out, np.int32(a.size), err]
    return Launch("calc_cumsum", (1,), (spec.lanes,), args, lambda: out, err)


def _matmul(text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
    """numpy's @: vector @ vector is the dot product, matrix @ vector a vector, ..."""
    a, b = operands
    if a.ndim == 0 or b.ndim == 0:
        raise CalcError(f"'{text}': @ multiplies vectors and matrices; use * for a number")
    left = a.reshape(1, -1) if a.ndim == 1 else a
    right = b.reshape(-1, 1) if b.ndim == 1 else b
    (m, k), (k2, p) = left.shape, right.shape
    if k != k2:
        raise CalcError(f"'{text}': shapes {a.shape} and {b.shape} do not align ({k} != {k2})")
    shape = {(1, 1): (), (1, 2): (p,), (2, 1): (m,)}.get((a.ndim, b.ndim), (m, p))
    out, err = _zeros(m * p), _zeros(1)
    transposed = np.ascontiguousarray(right.T).astype(np.int32).ravel()
    args = [left.astype(np.int32).ravel(), transposed, out, np.int32(k), err]
    if m > spec.max_grid_ctas or p > spec.threads_per_cta:
        raise CalcError(
            f"'{text}': a {m}x{p} result; the machine computes at most "
            f"{spec.max_grid_ctas} rows of {spec.threads_per_cta} per launch"
        )
    int16 = np.iinfo(np.int16)
    short = all(int16.min <= int(x.min()) and int(x.max()) <= int16.max for x in (a, b))
    kernel = "calc_matmul_short" if short else "calc_matmul"  # products in 31 bits, or split
    return Launch(kernel, (m,), (p,), args, lambda: out.reshape(shape), err)


def _primes(text: str, operands: list[np.ndarray], spec: MachineSpec) -> Launch:
    (n,) = operands
    if n.ndim:
        raise CalcError(f"'{text}': primes(n) takes a number, the largest candidate")
    if int(n) + 1 > spec.memory_words:  # checked before the flags are laid out
        raise CalcError(
            f"'{text}': primes up to {int(n)} need {int(n) + 1} words of memory; the "
            f"machine has {spec.memory_words}"
        )
    out, count = _zeros(int(n) + 1), _zeros(1)
    args = [np.int32(n), out, count]
    return Launch("calc_primes", (1,), (spec.lanes,), args, lambda: out[: count[0]].copy())


PLANS: dict[str, Callable[[str, list[np.ndarray], MachineSpec], Launch]] = {
    "isprime": _isprime,
    "sum": _reduction("sum"),
    "max": _reduction("max"),
    "min": _reduction("min"),
    "sort": _rearrange("sort"),
    "reverse": _rearrange("reverse"),
    "cumsum": _cumsum,
    "matmul": _matmul,
    "primes": _primes,
}


def error_message(name: str, text: str, err: int) -> str:
    """What a kernel's err word says, in Python's words."""
    if err & ERR_ZERO_DIVISION:
        return f"'{text}': division by zero"
    if err & ERR_NEGATIVE:
        return f"'{text}': {NEGATIVE_MESSAGES.get(name, 'a negative argument')}"
    return f"'{text}': the result leaves int32 ({np.iinfo(np.int32).min}..{np.iinfo(np.int32).max})"
