"""Encodings and craft-level neurons, in exact rational arithmetic (no torch): the logic a
block is meant to compute, independent of the HF execution tested elsewhere."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qwengpu.circuit import Bit, Bits, DualRail, Int, OneHot
from qwengpu.circuit.craft import Lin, Sig, merge_neurons, piecewise, step_ge
from qwengpu.circuit.geometry import GEOMETRIES
from qwengpu.circuit.numerics import ANCHOR_VALUE, is_bf16_exact
from qwengpu.errors import CircuitError


def evaluate(neurons, values: dict[Sig, int]) -> dict[Sig, Fraction]:
    """The logic-level semantics of a block: out += coef * max(gate, 0) * up."""
    out: dict[Sig, Fraction] = {}
    for n in neurons:
        h = max(n.gate.evaluate(values), 0) * n.up.evaluate(values)
        for s, c in n.out.items():
            out[s] = out.get(s, Fraction(0)) + c * h
    return out


@given(st.integers(1, 40), st.data())
def test_bits_roundtrip(width, data):
    value = data.draw(st.integers(0, (1 << width) - 1))
    enc = Bits(width)
    assert enc.decode(np.array(enc.encode(value), dtype=float)) == value
    many = enc.encode_many(np.array([value, 0]))
    assert enc.decode(many).tolist() == [value, 0]


@given(st.integers(2, 16), st.data())
def test_signed_and_dual_rail(width, data):
    v = data.draw(st.integers(-(1 << (width - 1)), (1 << (width - 1)) - 1))
    assert Bits(width, signed=True).decode(np.array(Bits(width, signed=True).encode(v))) == v
    u = data.draw(st.integers(0, (1 << width) - 1))
    dr = DualRail(width).encode(u)
    assert sum(x * x for x in dr) == width  # fixed norm
    assert DualRail(width).decode(np.array(dr)) == u


def test_onehot_int_bit():
    assert OneHot(5).encode(3) == [0, 0, 0, 1, 0]
    assert OneHot(5, allow_none=True).decode(np.zeros(5)) == -1
    assert Int(-3, 9).encode(-2) == [-2]
    with pytest.raises(CircuitError):
        Int(0, 300)  # not bf16-exact
    with pytest.raises(CircuitError):
        Bit().encode(2)


@settings(max_examples=60)
@given(st.integers(-20, 0), st.integers(1, 40), st.data())
def test_piecewise_computes_any_function(lo, span, data):
    hi = lo + span
    table = data.draw(st.lists(st.integers(-50, 50), min_size=span + 1, max_size=span + 1))
    x, out = Sig("x", 0), Sig("y", 0)
    neurons = piecewise(Lin({x: 1}), lo, hi, {out: lambda v: table[v - lo]})
    assert len(neurons) <= span + 1
    for v in range(lo, hi + 1):
        assert evaluate(neurons, {x: v}).get(out, 0) == table[v - lo]


@given(st.integers(-30, 30), st.integers(-40, 40))
def test_step(t, v):
    x, out = Sig("x", 0), Sig("y", 0)
    assert evaluate(step_ge(Lin({x: 1}), t, {out: 1}), {x: v}).get(out, 0) == int(v >= t)


def test_merge_shares_identical_units():
    x, a, b = Sig("x", 0), Sig("a", 0), Sig("b", 0)
    n1 = step_ge(Lin({x: 1}), 3, {a: 1})
    n2 = step_ge(Lin({x: 1}), 3, {b: 2})
    merged = merge_neurons(n1 + n2)
    assert len(merged) == 2
    assert evaluate(merged, {x: 5}) == {a: 1, b: 2}


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_anchor_scheme_is_exact(name):
    """count * 2^46 / hidden is a power of four, so RMSNorm scales by an exact 2^-s."""
    g = GEOMETRIES[name]
    scheme = g.anchor_scheme()
    mean_square = Fraction(scheme.count) * Fraction(ANCHOR_VALUE) ** 2 / g.hidden
    assert mean_square == Fraction(4) ** scheme.norm_shift
    assert scheme.unit == ANCHOR_VALUE / 2**scheme.norm_shift
    assert is_bf16_exact(ANCHOR_VALUE)
