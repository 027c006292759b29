"""Integer expressions in numpy's notation, parsed with `ast` under a whitelist (never
`eval`): int literals, lists and nested lists, `+ - * // % ** @`, unary minus and the
functions in FUNCTIONS. The tree holds the literals as they were written; computing is
the machine's (chat.calc)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from qwengpu.errors import QgpuError

INT32 = np.iinfo(np.int32)
MAX_LENGTH = 2000  # characters: an expression is a question, not a data file


class CalcError(QgpuError):
    """An expression the calculator cannot evaluate, said in one line."""


@dataclass(frozen=True)
class Literal:
    """Numbers as written: an int, a list, or a list of equal-length lists (int32)."""

    value: np.ndarray
    text: str


@dataclass(frozen=True)
class Op:
    """One operation: a kernel launch once its operands are known."""

    name: str
    args: tuple[Node, ...]
    text: str  # the source of this subexpression, for error messages


Node = Literal | Op

BINARY = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.MatMult: "matmul",
}
# name -> (smallest, largest) argument count
FUNCTIONS = {
    "sum": (1, None),
    "max": (1, None),
    "min": (1, None),
    "sort": (1, 1),
    "cumsum": (1, 1),
    "reverse": (1, 1),
    "abs": (1, 1),
    "factorial": (1, 1),
    "gcd": (2, 2),
    "lcm": (2, 2),
    "fib": (1, 1),
    "isprime": (1, 1),
    "primes": (1, 1),
    "isqrt": (1, 1),
    "popcount": (1, 1),
}
REFUSED_OPERATORS = {
    ast.Div: "'/' is float division; use '//' for integer division",
    ast.LShift: "'<<' is not supported; multiply by a power of two",
    ast.RShift: "'>>' is not supported; use '//' by a power of two",
    ast.BitAnd: "'&' is not supported",
    ast.BitOr: "'|' is not supported",
    ast.BitXor: "'^' is not supported (for a power, write '**')",
}


def parse(expression: str) -> Node:
    """The expression's tree; CalcError says what is wrong and where."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalcError("empty expression")
    if len(expression) > MAX_LENGTH:
        raise CalcError(f"the expression has {len(expression)} characters; at most {MAX_LENGTH}")
    text = expression.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        column = exc.offset or len(text)  # Python gives none for an unfinished expression
        raise CalcError(f"not an expression at column {column}: {exc.msg}") from None
    return _Parser(text).node(tree.body)


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def fail(self, node: ast.AST, message: str) -> CalcError:
        return CalcError(f"{message} (at column {getattr(node, 'col_offset', 0) + 1})")

    def node(self, node: ast.expr) -> Node:
        literal = self.literal(node)
        if literal is not None:
            return Literal(_int32_array(literal, self.text(node)), self.text(node))
        if isinstance(node, ast.BinOp):
            name = BINARY.get(type(node.op))
            if name is None:
                why = REFUSED_OPERATORS.get(type(node.op), "operator not supported")
                raise self.fail(node, why)
            return Op(name, (self.node(node.left), self.node(node.right)), self.text(node))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.node(node.operand)
            if isinstance(node.op, ast.UAdd):
                return operand
            return Op("neg", (operand,), self.text(node))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.List | ast.Tuple):
            raise self.fail(node, "list elements must be integers or lists of integers")
        if isinstance(node, ast.Constant):
            raise self.fail(node, f"{node.value!r} is not an integer")
        if isinstance(node, ast.Name):
            raise self.fail(node, f"unknown name '{node.id}' (functions: {', '.join(FUNCTIONS)})")
        raise self.fail(node, f"'{self.text(node)}' is not supported")

    def call(self, node: ast.Call) -> Op:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else self.text(node.func)
            raise self.fail(node, f"unknown function '{name}' (functions: {', '.join(FUNCTIONS)})")
        name = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, f"{name}() takes positional arguments only")
        least, most = FUNCTIONS[name]
        count = len(node.args)
        if count < least or (most is not None and count > most):
            wanted = str(least) if least == most else f"at least {least}"
            raise self.fail(node, f"{name}() takes {wanted} argument(s), got {count}")
        return Op(name, tuple(self.node(a) for a in node.args), self.text(node))

    def literal(self, node: ast.expr) -> int | list | None:
        """The numbers a literal writes (negative numbers included), else None."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, int) and not isinstance(node.value, bool):
                return node.value
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            inner = node.operand
            if isinstance(inner, ast.Constant) and type(inner.value) is int:
                return -inner.value if isinstance(node.op, ast.USub) else inner.value
            return None
        if isinstance(node, ast.List | ast.Tuple):
            items = [self.literal(e) for e in node.elts]
            if any(item is None for item in items):
                return None
            return items
        return None


def _int32_array(value: int | list, text: str) -> np.ndarray:
    try:
        array = np.array(value, dtype=object)
    except ValueError:  # some ragged nestings
        raise CalcError(f"'{text}': the rows of a matrix must have equal lengths") from None
    flat = array.ravel().tolist()
    if any(isinstance(x, list) for x in flat):
        raise CalcError(f"'{text}': the rows of a matrix must have equal lengths")
    if array.ndim > 2:
        raise CalcError(f"'{text}': at most two dimensions (a matrix)")
    if array.size == 0:
        raise CalcError(f"'{text}': an empty list")
    for x in flat:
        if not INT32.min <= x <= INT32.max:
            raise CalcError(f"{x} is outside int32 ({INT32.min}..{INT32.max})")
    return np.array(value, dtype=np.int32)
