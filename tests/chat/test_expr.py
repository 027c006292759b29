"""The calculator's parser: numpy's notation under a whitelist, literals as written."""

from __future__ import annotations

import numpy as np
import pytest

from qwengpu.chat.expr import FUNCTIONS, CalcError, Literal, Op, parse


def test_literals_and_operations_keep_their_source():
    tree = parse(" [1, -2, 3] @ [[4], [5], [6]] + -7 ")
    assert isinstance(tree, Op) and tree.name == "add"
    matmul, seven = tree.args
    assert matmul.name == "matmul" and matmul.text == "[1, -2, 3] @ [[4], [5], [6]]"
    left, right = matmul.args
    assert isinstance(left, Literal) and left.value.tolist() == [1, -2, 3]
    assert right.value.shape == (3, 1) and right.value.dtype == np.int32
    assert isinstance(seven, Literal) and int(seven.value) == -7  # a negative literal


def test_every_operator_and_function_parses():
    ops = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod", "**": "pow"}
    for symbol, name in ops.items():
        assert parse(f"6 {symbol} 3").name == name
    assert parse("[1] @ [2]").name == "matmul"
    assert parse("-(1 + 2)").name == "neg" and parse("+(1 + 2)").name == "add"
    for name, (least, _) in FUNCTIONS.items():
        call = parse(f"{name}({', '.join(['3'] * least)})")
        assert call.name == name and len(call.args) == least
    assert len(parse("max(1, 2, 3)").args) == 3


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "empty expression"),
        ("1 +", "not an expression at column"),
        ("1 / 2", "use '//' for integer division"),
        ("1 << 2", "'<<' is not supported"),
        ("2 ^ 3", "for a power, write '\\*\\*'"),
        ("2.5 + 1", "2.5 is not an integer"),
        ("True + 1", "True is not an integer"),
        ("'a' * 3", "'a' is not an integer"),
        ("x + 1", "unknown name 'x'"),
        ("eval('1')", "unknown function 'eval'"),
        (
            "__import__('os').system('true')",
            "'__import__\\('os'\\).system' is not supported|unknown",
        ),
        ("().__class__", "is not supported"),
        ("[i for i in [1]]", "is not supported"),
        ("sum(start=1)", "takes positional arguments only"),
        ("gcd(1)", "gcd\\(\\) takes 2 argument\\(s\\), got 1"),
        ("sort([1], [2])", "sort\\(\\) takes 1 argument\\(s\\), got 2"),
        ("max()", "takes at least 1"),
        ("[1, 2 + 3]", "list elements must be integers or lists of integers"),
        ("[[1, 2], [3]]", "rows of a matrix must have equal lengths"),
        ("[[[1]]]", "at most two dimensions"),
        ("[]", "an empty list"),
        ("2147483648", "2147483648 is outside int32"),
        ("[-2147483649]", "-2147483649 is outside int32"),
        ("1 if 2 else 3", "is not supported"),
        ("1 < 2", "is not supported"),
        ("9" * 3000, "at most 2000"),
    ],
)
def test_what_is_refused_says_what_and_where(expression, message):
    with pytest.raises(CalcError, match=message) as caught:
        parse(expression)
    assert "\n" not in str(caught.value)


def test_int32_limits_are_literals():
    assert int(parse("-2147483648").value) == -(2**31)
    assert int(parse("2147483647").value) == 2**31 - 1
