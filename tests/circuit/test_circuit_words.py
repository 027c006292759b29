"""Word-level primitives (32-bit, 2 lanes) on random inputs through real HF layers."""

from __future__ import annotations

from functools import cache

import numpy as np
from circuit_helpers import WIDE, run_paths
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from qwengpu.circuit import Bit, Bits, Circuit, compile_circuit
from qwengpu.isa.instr import Cond

# No shrinking: every example runs real models in two dtypes and two paths.
SETTINGS = settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
MASK = (1 << 32) - 1
LANES = 2
N = 24  # values per example, fed as 4 sequences of 6 tokens (fixed shapes)

EDGES = [0, 1, MASK, 1 << 31, (1 << 31) - 1, 0xFFFF, 0x10000, 0x0F0F0F0F]
word = st.one_of(st.sampled_from(EDGES), st.integers(0, MASK))


def words(n: int = N, lanes: int = LANES):
    row = st.lists(word, min_size=lanes, max_size=lanes)
    return st.lists(row, min_size=n, max_size=n).map(lambda x: np.array(x, dtype=np.int64))


def signed(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 1 << 31, x - (1 << 32), x)


@cache
def arith():
    c = Circuit("arith")
    a = c.input("a", Bits(32), lanes=LANES)
    b = c.input("b", Bits(32), lanes=LANES)
    cin = c.input("cin", Bit())
    outs = {
        "add": c.add(a, b),
        "addc": c.add(a, b, carry_in=cin),
        "sub": c.sub(a, b),
        "neg": c.neg(a),
    }
    c.output(*outs.values())
    return compile_circuit(c, WIDE, pad_to_pattern=False), outs


@SETTINGS
@given(words(), words(), st.lists(st.integers(0, 1), min_size=N, max_size=N))
def test_add_sub(a, b, cin):
    compiled, outs = arith()
    cin = np.array(cin)
    want = {
        "add": (a + b) & MASK,
        "addc": (a + b + cin[:, None]) & MASK,
        "sub": (a - b) & MASK,
        "neg": (-a) & MASK,
    }
    embeds = compiled.embed({"a": a, "b": b, "cin": cin}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: want[k] for k in outs})


CONDS = list(Cond)


@cache
def comparisons():
    c = Circuit("compare")
    a = c.input("a", Bits(32), lanes=LANES)
    b = c.input("b", Bits(32), lanes=LANES)
    outs = {cond: c.compare(a, b, cond) for cond in CONDS}
    c.output(*outs.values())
    return compile_circuit(c, WIDE, pad_to_pattern=False), outs


def expected_compare(a: np.ndarray, b: np.ndarray, cond: Cond) -> np.ndarray:
    sa, sb = signed(a), signed(b)
    table = {
        Cond.EQ: a == b,
        Cond.NE: a != b,
        Cond.LT: sa < sb,
        Cond.LE: sa <= sb,
        Cond.GT: sa > sb,
        Cond.GE: sa >= sb,
        Cond.LO: a < b,
        Cond.LS: a <= b,
        Cond.HI: a > b,
        Cond.HS: a >= b,
    }
    return table[cond].astype(int)


@SETTINGS
@given(words(), words(), st.lists(st.booleans(), min_size=N, max_size=N))
def test_compare(a, b, same):
    compiled, outs = comparisons()
    b = np.where(np.array(same)[:, None], a, b)
    embeds = compiled.embed({"a": a, "b": b}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: expected_compare(a, b, k) for k in outs})


@cache
def shifts():
    c = Circuit("shifts")
    x = c.input("x", Bits(32))
    s = c.input("s", Bits(32))
    outs = {"shl": c.shl(x, s), "shr": c.shr(x, s), "sra": c.sra(x, s)}
    c.output(*outs.values())
    return compile_circuit(c, WIDE, pad_to_pattern=False), outs


amount = st.one_of(st.integers(0, 31), st.sampled_from([32, 33, 63, 64, 1 << 20, MASK]))


@SETTINGS
@given(words(lanes=1), st.lists(amount, min_size=N, max_size=N))
def test_shifts(x, s):
    compiled, outs = shifts()
    x = x[:, 0]
    s = np.array(s, dtype=np.int64)
    big = s >= 32
    sh = np.where(big, 0, s)
    want = {
        "shl": np.where(big, 0, (x << sh) & MASK),
        "shr": np.where(big, 0, x >> sh),
        "sra": np.where(big, np.where(x >> 31, MASK, 0), (signed(x) >> sh) & MASK),
    }
    embeds = compiled.embed({"x": x, "s": s}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: want[k] for k in outs})


@cache
def bitwise():
    c = Circuit("bitwise")
    a = c.input("a", Bits(32), lanes=LANES)
    b = c.input("b", Bits(32), lanes=LANES)
    outs = {"and": c.bit_and(a, b), "or": c.bit_or(a, b), "xor": c.bit_xor(a, b)}
    c.output(*outs.values())
    return compile_circuit(c, WIDE, pad_to_pattern=False), outs


@SETTINGS
@given(words(), words())
def test_bitwise(a, b):
    compiled, outs = bitwise()
    want = {"and": a & b, "or": a | b, "xor": a ^ b}
    embeds = compiled.embed({"a": a, "b": b}).reshape(4, 6, -1)
    run_paths(compiled, embeds, {outs[k]: want[k] for k in outs})
