"""The calculator's kernels against Python's own arithmetic, on the interpreter (fast):
every function, numpy's broadcasting and @, floor division and modulo with signs, and
every way a value leaves int32. The same kernels run on the model in test_calc_model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qwengpu.chat.calc import Calculator
from qwengpu.chat.expr import CalcError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@pytest.fixture(scope="module")
def calc() -> Calculator:
    return Calculator("interp")


def _isprime(n: int) -> int:
    return int(n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1)))


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


EXAMPLES = {
    "[1,2,3] @ [4,5,6]": 32,
    "[[1,2],[3,4]] @ [[5,6],[7,8]]": [[19, 22], [43, 50]],
    "[[1,2,3],[4,5,6]] @ [1,0,-1]": [-2, -2],
    "[1,2] @ [[1,2,3],[4,5,6]]": [9, 12, 15],
    "[100000, 100000] @ [100000, -100000]": 0,  # exact products on the way
    "2 ** 10 - 3 * 7": 1003,
    "-7 // 2": -4,
    "7 // -2": -4,
    "-7 % 3": 2,
    "7 % -3": -2,
    "-2147483648 // 1": INT32_MIN,
    "-[1, -2]": [-1, 2],
    "[1, 2] * 3 + [[10], [20]]": [[13, 16], [23, 26]],
    "sum([1, 2, 3])": 6,
    "sum([[1, 2], [3, 4]])": 10,
    "sum([2147483647, 1, -1])": INT32_MAX,  # exact on the way
    "max([3, -1, 9, 2])": 9,
    "min([3, -1, 9, 2])": -1,
    "max(4, 2, 8)": 8,
    "min(4, -2147483648)": INT32_MIN,
    "sort([5, 3, -9, 1, 3])": [-9, 1, 3, 3, 5],
    "cumsum([1, 2, 3, 4])": [1, 3, 6, 10],
    "cumsum([[1, 2], [3, 4]])": [1, 3, 6, 10],
    "reverse([1, 2, 3])": [3, 2, 1],
    "abs([-5, 5, 0])": [5, 5, 0],
    "factorial(12)": 479001600,
    "factorial(0)": 1,
    "gcd(12, 18)": 6,
    "gcd(-12, 0)": 12,
    "gcd([12, 15], 9)": [3, 3],
    "lcm(4, 6)": 12,
    "lcm(-4, 6)": 12,
    "lcm(0, 5)": 0,
    "fib(46)": 1836311903,
    "fib(0) + fib(1)": 1,
    "isprime([2, 4, 97, 1, 0, -7, 7919])": [1, 0, 1, 0, 0, 0, 1],
    "isprime(65537)": 1,
    "primes(30)": [2, 3, 5, 7, 11, 13, 17, 19, 23, 29],
    "primes(1)": [],
    "isqrt(1000000)": 1000,
    "isqrt(2147483647)": 46340,
    "popcount([255, -1, 0])": [8, 32, 0],
    "factorial(5) + fib(10) * gcd(4, 6)": 230,
}


@pytest.mark.parametrize(("expression", "expected"), EXAMPLES.items())
def test_examples(calc, expression, expected):
    assert calc.evaluate(expression).value == expected


def test_one_launch_per_operation_in_waves(calc):
    """Independent operations share a wave; the value of one feeds the next."""
    result = calc.evaluate("factorial(5) + fib(10) * gcd(4, 6)")
    kernels = [launch.kernel for launch in result.launches]
    assert sorted(kernels[:3]) == ["calc_factorial", "calc_fib", "calc_gcd"]
    assert kernels[3:] == ["calc_mul", "calc_add"]
    (many,) = [calc.evaluate_many(["1 + 2", "sum([4, 5])"])]
    assert [r.value for r in many] == [3, 9] and [len(r.launches) for r in many] == [1, 1]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("2147483647 + 1", "'2147483647 \\+ 1': the result leaves int32"),
        ("-2147483648 - 1", "leaves int32"),
        ("65536 * 32768", "leaves int32"),
        ("2 ** 31", "leaves int32"),
        ("-2147483648 // -1", "leaves int32"),
        ("-[-2147483648]", "leaves int32"),
        ("abs(-2147483648)", "leaves int32"),
        ("factorial(13)", "'factorial\\(13\\)': the result leaves int32"),
        ("fib(47)", "leaves int32"),
        ("sum([2147483647, 1])", "leaves int32"),
        ("cumsum([2147483647, 1])", "leaves int32"),
        ("[65536, 65536] @ [65536, 65536]", "leaves int32"),
        (
            "[-2147483648, -2147483648, -2147483648, -2147483648] @ "
            "[-2147483648, -2147483648, -2147483648, -2147483648]",
            "leaves int32",
        ),  # 2**64
        ("lcm(65536, 65537)", "leaves int32"),
        ("gcd(-2147483648, 0)", "leaves int32"),
        ("1 // 0", "'1 // 0': division by zero"),
        ("[1, 2] % 0", "division by zero"),
        ("2 ** -1", "a negative exponent"),
        ("factorial(-1)", "the factorial of a negative number"),
        ("fib(-3)", "a negative Fibonacci index"),
        ("isqrt(-4)", "the square root of a negative number"),
        ("[1, 2] @ [1, 2, 3]", "do not align"),
        ("[1, 2] + [1, 2, 3]", "do not broadcast"),
        ("[1] @ 2", "use \\* for a number"),
        ("sort(5)", "sort takes a list \\(a vector\\), not a number"),
        ("reverse([[1, 2], [3, 4]])", "not a 2x2 matrix"),
        ("max([1], 2)", "max\\(a, b, ...\\) takes numbers"),
        ("primes([5])", "takes a number"),
        ("primes(1000)", "primes up to 1000 need 1001 words of memory; the machine has 126"),
        ("sum(primes(1))", "an operand is an empty list"),
        ("sum(" + str(list(range(200))) + ")", "memory|words"),
    ],
)
def test_errors_are_one_line_and_name_the_operation(calc, expression, message):
    with pytest.raises(CalcError, match=message) as caught:
        calc.evaluate(expression)
    assert "\n" not in str(caught.value)


WORDS = st.integers(INT32_MIN, INT32_MAX)
SMALL = st.integers(-50, 50)
PYTHON = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "//": lambda x, y: x // y,
    "%": lambda x, y: x % y,
}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(PYTHON)), st.lists(st.tuples(WORDS, WORDS), min_size=1, max_size=8))
def test_binary_operators_are_pythons(calc_for_hypothesis, symbol, pairs):
    """Elementwise, in one launch per operator: every element is Python's value, or the
    launch says the value leaves int32 (or divides by zero) exactly when one does."""
    xs, ys = [list(v) for v in zip(*pairs, strict=True)]
    want = []
    for x, y in pairs:
        want.append(None if symbol in "//%" and y == 0 else PYTHON[symbol](x, y))
    expression = f"{xs} {symbol} {ys}"
    if any(w is None for w in want):
        with pytest.raises(CalcError, match="division by zero"):
            calc_for_hypothesis.evaluate(expression)
    elif any(not INT32_MIN <= w <= INT32_MAX for w in want):
        with pytest.raises(CalcError, match="leaves int32"):
            calc_for_hypothesis.evaluate(expression)
    else:
        assert calc_for_hypothesis.evaluate(expression).value == want


@settings(max_examples=40, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=6), st.lists(WORDS, min_size=1, max_size=6))
def test_dot_products_are_exact(calc_for_hypothesis, xs, ys):
    n = min(len(xs), len(ys))
    xs, ys = xs[:n], ys[:n]
    want = sum(x * y for x, y in zip(xs, ys, strict=True))
    if INT32_MIN <= want <= INT32_MAX:
        assert calc_for_hypothesis.evaluate(f"{xs} @ {ys}").value == want
    else:
        with pytest.raises(CalcError, match="leaves int32"):
            calc_for_hypothesis.evaluate(f"{xs} @ {ys}")


@settings(max_examples=40, deadline=None)
@given(SMALL, st.integers(0, 12), st.integers(-200, 5000))
def test_functions_are_pythons(calc_for_hypothesis, x, small, n):
    values = calc_for_hypothesis.evaluate_many(
        [
            f"{x} ** 3",
            f"factorial({small})",
            f"fib({small * 3})",
            f"isprime({n})",
            f"isqrt({abs(n)})",
            f"gcd({x}, {n})",
            f"popcount({n})",
        ]  # fmt: skip
    )
    assert [v.value for v in values] == [
        x**3, math.factorial(small), _fib(small * 3), _isprime(n), math.isqrt(abs(n)),
        math.gcd(x, n), bin(n & 0xFFFFFFFF).count("1"),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def calc_for_hypothesis() -> Calculator:
    return Calculator("interp")


def test_results_are_plain_python(calc):
    for expression in ("[[1, 2], [3, 4]] @ [[1, 0], [0, 1]]", "sum([1])", "sort([2, 1])"):
        value = calc.evaluate(expression).value
        assert not isinstance(value, np.ndarray | np.integer)


def test_the_step_budget_is_the_callers():
    """A launch past the machine's default budget says so; a larger budget runs it."""
    with pytest.raises(CalcError, match="step budget of 4096"):
        Calculator("interp").evaluate("isprime(10000019)")  # 13,675 steps on 4-lane warps
    assert Calculator("interp", max_steps=20_000).evaluate("isprime(10000019)").value == 1
