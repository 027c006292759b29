"""Bit-level primitives on random inputs through real HF layers (both dtypes, both paths)."""

from __future__ import annotations

from functools import cache

import numpy as np
from circuit_helpers import TINY1, run_paths
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from qwengpu.circuit import Bit, Bits, Circuit, Int, OneHot, compile_circuit

# No shrinking: every example runs real models in two dtypes and two paths.
SETTINGS = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
LANES = 2
W = 6  # bits per lane


MAX_TOKENS = 24  # fed as 4 sequences of 6 tokens (fixed shapes)


def tokens(n_bits: int, n: int, lanes: int = LANES):
    """A strategy for [n, lanes] arrays of n_bits-bit values."""
    row = st.lists(st.integers(0, (1 << n_bits) - 1), min_size=lanes, max_size=lanes)
    return st.lists(row, min_size=n, max_size=n).map(np.array)


def values(hi: int, n: int):
    return st.lists(st.integers(0, hi), min_size=n, max_size=n).map(np.array)


@cache
def gates():
    c = Circuit("gates")
    a = c.input("a", Bits(W), lanes=LANES)
    b = c.input("b", Bits(W), lanes=LANES)
    d = c.input("d", Bits(W), lanes=LANES)
    outs = {
        "not": c.not_(a),
        "and": c.and_(a, b),
        "and3": c.and_(a, b, d),
        "or": c.or_(a, b),
        "or3": c.or_(a, b, d),
        "xor": c.xor(a, b),
        "xor3": c.xor(a, b, d),
        "all": c.and_bits(a),
        "any": c.or_bits(a),
        "popc": c.popcount(a),
        "copy": c.copy(a),
    }
    c.output(*outs.values())
    return compile_circuit(c, TINY1, pad_to_pattern=False), outs


def popcount(x: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda v: bin(int(v)).count("1"))(x)


@SETTINGS
@given(st.data())
def test_gates(data):
    compiled, outs = gates()
    n = MAX_TOKENS  # fixed shapes: oneDNN compiles a bf16 kernel per new shape
    a, b, d = (data.draw(tokens(W, n)) for _ in range(3))
    m = (1 << W) - 1
    want = {
        "not": m - a,
        "and": a & b,
        "and3": a & b & d,
        "or": a | b,
        "or3": a | b | d,
        "xor": a ^ b,
        "xor3": a ^ b ^ d,
        "all": (a == m).astype(int),
        "any": (a != 0).astype(int),
        "popc": popcount(a),
        "copy": a,
    }
    embeds = compiled.embed({"a": a, "b": b, "d": d}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: want[k] for k in outs})


@cache
def selection():
    c = Circuit("select")
    a = c.input("a", Bits(W), lanes=LANES)
    b = c.input("b", Bits(W), lanes=LANES)
    s = c.input("s", Bit())  # one lane: broadcast to both lanes
    oh = c.input("oh", OneHot(3))
    table = [(7 * i + 3) % 64 for i in range(1 << W)]
    outs = {
        "mux": c.mux(s, a, b),
        "select": c.select(oh, [a, b, c.not_(a)]),
        "lookup": c.lookup(a, table, Bits(W)),
        "eq": c.equal(a, b),
        "eq5": c.equal_const(a, 5),
        "dec": c.decoder(a),
    }
    prio, anyset = c.priority(a)
    hi_bits, _ = c.priority(a, lowest=False, onehot=False)
    outs.update({"prio": prio, "prio_any": anyset, "prio_hi": hi_bits})
    outs["enc"] = c.encoder(outs["dec"])
    c.output(*outs.values())
    return compile_circuit(c, TINY1, pad_to_pattern=False), outs, table


def lowest_set(v: int) -> int:
    v = int(v)
    return (v & -v).bit_length() - 1 if v else -1


@SETTINGS
@given(st.data())
def test_selection(data):
    compiled, outs, table = selection()
    n = MAX_TOKENS  # fixed shapes: oneDNN compiles a bf16 kernel per new shape
    a = data.draw(tokens(W, n))
    same = data.draw(values(1, n))[:, None] == 1
    b = np.where(same, a, data.draw(tokens(W, n)))
    s = data.draw(values(1, n))
    oh = data.draw(values(2, n))
    options = [a, b, (1 << W) - 1 - a]
    want = {
        "mux": np.where(s[:, None] == 1, a, b),
        "select": np.choose(oh[:, None], options),
        "lookup": np.array(table)[a],
        "eq": (a == b).astype(int),
        "eq5": (a == 5).astype(int),
        "dec": a,
        "enc": a,
        "prio": np.vectorize(lowest_set)(a),
        "prio_any": (a != 0).astype(int),
        "prio_hi": np.vectorize(lambda v: int(v).bit_length() - 1 if v else 0)(a),
    }
    embeds = compiled.embed({"a": a, "b": b, "s": s, "oh": oh}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: want[k] for k in outs})


@cache
def arithmetic_logic():
    c = Circuit("thresholds")
    a = c.input("a", Bits(W))
    b = c.input("b", Bits(W))
    form = a.value() - 2 * b.value()
    outs = {
        "ge": c.threshold(form, -7),
        "and_like": c.threshold(a[0] + a[1] + a[2], 3),
        "fn": c.function(a.value() + b.value(), lambda v: (v * v) % 29, Int(0, 28)),
        "int": c.popcount(a),
    }
    outs["bits"] = c.to_bits(outs["int"])
    wide = c.input("x", Bits(12))
    y = c.input("y", Bits(12))
    outs["eq12"] = c.equal(wide, y)
    c.output(*outs.values())
    return compile_circuit(c, TINY1, pad_to_pattern=False), outs


@SETTINGS
@given(st.data())
def test_thresholds_functions_equality(data):
    compiled, outs = arithmetic_logic()
    n = MAX_TOKENS  # fixed shapes: oneDNN compiles a bf16 kernel per new shape
    a, b = data.draw(values(63, n)), data.draw(values(63, n))
    x = data.draw(values(4095, n))
    y = np.where(data.draw(values(1, n)) == 1, x, x ^ (1 << (np.arange(n) % 12)))
    pc = popcount(a)
    want = {
        "ge": (a - 2 * b >= -7).astype(int),
        "and_like": ((a & 7) == 7).astype(int),
        "fn": ((a + b) ** 2) % 29,
        "int": pc,
        "bits": pc,
        "eq12": (x == y).astype(int),
    }
    embeds = compiled.embed({"a": a, "b": b, "x": x, "y": y}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: want[k] for k in outs})
