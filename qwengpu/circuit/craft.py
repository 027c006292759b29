"""Craft: SwiGLU neurons over named residual channels (the tracr "craft" level).

A `Lin` is an exact linear form over field channels (`Sig`) plus a constant. A `Neuron` is
one SwiGLU unit of an MLP, in logic units:

    h = max(gate, 0) * up                    (gate, up: Lins, integer-valued)
    residual[sig] += coef * h  for each (sig, coef) in out

The emitter writes gate * LOGIC_GAIN into gate_proj, up into up_proj and coef / LOGIC_GAIN
into down_proj; silu(LOGIC_GAIN * g) == LOGIC_GAIN * max(g, 0) exactly for every integer g
(see numerics.LOGIC_GAIN), so the real SwiGLU computes exactly this. The builders below
are the standard ways to compute logic with such units; each docstring states the logic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from qwengpu.circuit.numerics import BF16_EXACT_INT, FP32_EXACT_INT
from qwengpu.errors import CircuitError

Number = int | Fraction


@dataclass(frozen=True, order=True)
class Sig:
    """One residual channel of a field: (field name, flat channel index)."""

    field: str
    index: int

    def __repr__(self) -> str:
        return f"{self.field}[{self.index}]"


class Lin:
    """An exact linear form sum(coef * channel) + const over field channels."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: Mapping[Sig, Number] | None = None, const: Number = 0) -> None:
        self.terms: dict[Sig, Fraction] = {}
        if terms:
            for sig, coef in terms.items():
                if coef:
                    self.terms[sig] = Fraction(coef)
        self.const = Fraction(const)

    # -- construction ------------------------------------------------------------------
    @staticmethod
    def of(value: LinLike) -> Lin:
        if isinstance(value, Lin):
            return value
        if isinstance(value, Sig):
            return Lin({value: 1})
        if isinstance(value, int | Fraction):
            return Lin(const=value)
        raise TypeError(f"not a linear form: {value!r}")

    def __add__(self, other: LinLike) -> Lin:
        other = Lin.of(other)
        terms = dict(self.terms)
        for sig, coef in other.terms.items():
            terms[sig] = terms.get(sig, Fraction(0)) + coef
        return Lin(terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> Lin:
        return Lin({s: -c for s, c in self.terms.items()}, -self.const)

    def __sub__(self, other: LinLike) -> Lin:
        return self + (-Lin.of(other))

    def __rsub__(self, other: LinLike) -> Lin:
        return Lin.of(other) - self

    def __mul__(self, k: Number) -> Lin:
        if not isinstance(k, int | Fraction):
            raise TypeError("a Lin can only be scaled by a number")
        return Lin({s: c * k for s, c in self.terms.items()}, self.const * k)

    __rmul__ = __mul__

    # -- inspection --------------------------------------------------------------------
    def key(self) -> tuple:
        return (tuple(sorted(self.terms.items())), self.const)

    def is_integer(self) -> bool:
        return self.const.denominator == 1 and all(c.denominator == 1 for c in self.terms.values())

    def fields(self) -> set[str]:
        return {s.field for s in self.terms}

    def bounds(self, ranges: Callable[[Sig], tuple[int, int]]) -> tuple[Fraction, Fraction]:
        """Interval of the form given each channel's integer range."""
        lo = hi = self.const
        for sig, coef in self.terms.items():
            a, b = ranges(sig)
            lo += min(coef * a, coef * b)
            hi += max(coef * a, coef * b)
        return lo, hi

    def evaluate(self, values: Mapping[Sig, int]) -> Fraction:
        return self.const + sum((c * values[s] for s, c in self.terms.items()), Fraction(0))

    def __repr__(self) -> str:
        parts = [f"{c}*{s!r}" for s, c in sorted(self.terms.items())]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


LinLike = Lin | Sig | int | Fraction
ONE = Lin(const=1)


@dataclass
class Neuron:
    """One SwiGLU unit: out[sig] += coef * max(gate, 0) * up.

    `analog` neurons read noisy DeltaNet landing values (see memory.py); their exactness is
    argued there, and the integer checks of `validate` do not apply to them.
    """

    gate: Lin
    up: Lin = field(default_factory=lambda: ONE)
    out: dict[Sig, Fraction] = field(default_factory=dict)
    analog: bool = False

    def key(self) -> tuple:
        return (self.gate.key(), self.up.key(), self.analog)

    def fields(self) -> set[str]:
        return self.gate.fields() | self.up.fields()


def neuron(gate: LinLike, out: Mapping[Sig, Number], up: LinLike = 1) -> Neuron:
    """A unit computing `sum coef * max(gate, 0) * up` into the channels of `out`."""
    return Neuron(Lin.of(gate), Lin.of(up), {s: Fraction(c) for s, c in out.items() if c})


def constant(out: Mapping[Sig, Number]) -> Neuron:
    """Adds constants: the bias unit (gate 1, up 1), shared by every block of a layer."""
    return neuron(ONE, out)


def relu_of(form: LinLike, out: Mapping[Sig, Number]) -> Neuron:
    """out += coef * max(form, 0)."""
    return neuron(form, out)


def step_ge(form: LinLike, threshold: int, out: Mapping[Sig, Number]) -> list[Neuron]:
    """out += coef * [form >= threshold] for an integer-valued form: two ReLUs,
    max(f - t + 1, 0) - max(f - t, 0), which is 0 below t and 1 from t on."""
    f = Lin.of(form)
    return [
        neuron(f - (threshold - 1), out),
        neuron(f - threshold, {s: -Fraction(c) for s, c in out.items()}),
    ]


def piecewise(
    form: LinLike,
    lo: int,
    hi: int,
    functions: Mapping[Sig, Callable[[int], int]],
) -> list[Neuron]:
    """out[sig] += functions[sig](form) for an integer form in [lo, hi]: a ReLU basis.

    Any function f on the integers lo..hi is f(lo) + sum_t d_t * max(form - t, 0) over the
    knots t = lo .. hi-1, with d_t the change of slope at t. One unit per knot where some
    output's slope changes (shared by all outputs), plus the bias unit for f(lo).
    """
    f = Lin.of(form)
    if hi - lo > BF16_EXACT_INT:
        raise CircuitError(f"piecewise: range [{lo}, {hi}] wider than {BF16_EXACT_INT}")
    neurons: list[Neuron] = []
    base = {s: fn(lo) for s, fn in functions.items() if fn(lo)}
    if base:
        neurons.append(constant(base))
    previous_slope: dict[Sig, int] = {s: 0 for s in functions}
    for t in range(lo, hi):
        out: dict[Sig, int] = {}
        for s, fn in functions.items():
            slope = fn(t + 1) - fn(t)
            if slope != previous_slope[s]:
                out[s] = slope - previous_slope[s]
            previous_slope[s] = slope
        if out:
            neurons.append(neuron(f - t, out))
    return neurons


def clear_neurons(sigs: Iterable[Sig], ranges: Callable[[Sig], tuple[int, int]]) -> list[Neuron]:
    """Reset channels to exactly 0: out -= x, with x = max(x - lo, 0) + lo (one unit per
    channel, plus the shared bias unit when lo != 0)."""
    neurons: list[Neuron] = []
    offsets: dict[Sig, int] = {}
    for sig in sigs:
        lo, _ = ranges(sig)
        neurons.append(neuron(Lin({sig: 1}) - lo, {sig: -1}))
        if lo:
            offsets[sig] = -lo
    if offsets:
        neurons.append(constant(offsets))
    return neurons


def merge_neurons(neurons: Iterable[Neuron]) -> list[Neuron]:
    """Common-subexpression elimination: units with the same gate and up become one unit
    whose outputs add up; units left with no output are dropped."""
    merged: dict[tuple, Neuron] = {}
    for n in neurons:
        key = n.key()
        if key in merged:
            target = merged[key].out
            for sig, coef in n.out.items():
                target[sig] = target.get(sig, Fraction(0)) + coef
        else:
            merged[key] = Neuron(n.gate, n.up, dict(n.out), n.analog)
    result = []
    for n in merged.values():
        n.out = {s: c for s, c in n.out.items() if c}
        if n.out:
            result.append(n)
    return result


def validate_neuron(
    n: Neuron, ranges: Callable[[Sig], tuple[int, int]], where: str
) -> tuple[Fraction, Fraction]:
    """Check that a logic unit is exact in bfloat16 and float32; returns its value range.

    gate and up must be integer forms; the positive part of the gate, |up| and
    max(gate, 0) * |up| must stay within 256 (bf16 integers), so that gate_proj, the SiLU,
    up_proj and their product are all exact. Negative gates may be of any size: silu is
    exactly 0 there even after rounding.
    """
    if n.analog:
        return Fraction(0), Fraction(0)
    if not (n.gate.is_integer() and n.up.is_integer()):
        raise CircuitError(f"{where}: unit with non-integer gate/up ({n.gate} ; {n.up})")
    glo, ghi = n.gate.bounds(ranges)
    ulo, uhi = n.up.bounds(ranges)
    if ghi <= 0:
        raise CircuitError(f"{where}: unit whose gate {n.gate} is never positive")
    if ghi > BF16_EXACT_INT:
        raise CircuitError(f"{where}: gate {n.gate} reaches {ghi} > {BF16_EXACT_INT}")
    umax = max(abs(ulo), abs(uhi))
    if umax > BF16_EXACT_INT or ghi * umax > BF16_EXACT_INT:
        raise CircuitError(
            f"{where}: unit value max(gate,0)*up reaches {ghi * umax} > {BF16_EXACT_INT}"
        )
    if -glo * 128 >= FP32_EXACT_INT:
        raise CircuitError(f"{where}: gate {n.gate} reaches {glo}: too negative for float32")
    h = [Fraction(0), ghi * ulo, ghi * uhi]
    return min(h), max(h)
