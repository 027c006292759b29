"""Multipliers: 32 x 32 -> low 32 bits, and the high 32 bits (unsigned or signed).

A multiplier is an array of partial products, a reduction tree, and a final adder, all in
exact integer neurons:

  M1  partial products: one product neuron max(a_i, 0) * b_j per pair, summed by the down
      projection into column counts C_m = sum_{i+j=m} a_i b_j (<= 32: exact everywhere).
  M2  each column count to its bits (a ReLU basis over [0, C_max]); every bit position now
      holds at most 6 bits.
  M3  windows of 3 positions: V = sum 2^q e_q (<= 42) to bits; every position now holds at
      most 2 bits: two binary operands.
  A1, A2  the two-sublayer carry-select adder (words.carry_select_add) on those operands.

The high half needs the full 64-bit sum, whose carry chain is longer than one lookahead
threshold can hold in bfloat16 (|T| <= 255 covers 8 nibbles), so it adds a third sublayer:
A2 computes the carry into bit 32, A3 selects the high nibbles with it. Signed high
products use Baugh-Wooley: partial products that involve exactly one sign bit enter
complemented (1 - a_31 b_j), and the constant 2^32 + 2^63 corrects the sum mod 2^64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qwengpu.circuit import craft
from qwengpu.circuit.craft import Lin, Neuron
from qwengpu.circuit.encodings import Bits, IntVec
from qwengpu.circuit.ir import Field
from qwengpu.circuit.logic import _ch, _lanes, _out
from qwengpu.circuit.words import (
    NIBBLE,
    CarrySelect,
    _ranges,
    _word,
    carry_select_parts,
)
from qwengpu.errors import CircuitError

if TYPE_CHECKING:
    from qwengpu.circuit.ir import Circuit


@dataclass(frozen=True)
class Term:
    """An integer form with weight 2^position in a multi-operand sum."""

    position: int
    form: Lin
    lo: int
    hi: int


def compress(
    c: Circuit, terms: list[list[Term]], window: int, width: int, name: str
) -> list[list[Term]]:
    """One reduction sublayer: for each window of `window` bit positions, the value
    V = sum 2^(pos - start) * term (an integer in [0, 256)) is written out as bits at
    positions start .. start + bitlen(V_max) - 1 (positions >= width are dropped: the sum
    is taken mod 2^width). Returns the new terms (all single bits)."""
    lanes = len(terms)
    plans = []
    for lane in range(lanes):
        groups: dict[int, list[Term]] = {}
        for t in terms[lane]:
            groups.setdefault(t.position // window, []).append(t)
        lane_plan = []
        for g, members in sorted(groups.items()):
            start = g * window
            form = sum((t.form * (1 << (t.position - start)) for t in members), Lin())
            hi = sum(t.hi << (t.position - start) for t in members)
            lo = sum(t.lo << (t.position - start) for t in members)
            if lo < 0 or hi > 255:
                raise CircuitError(f"{name}: window value range [{lo}, {hi}] not in [0, 255]")
            nbits = min(max(1, hi.bit_length()), width - start)
            lane_plan.append((start, form, lo, hi, nbits))
        plans.append(lane_plan)
    nchan = max(sum(p[4] for p in lane_plan) for lane_plan in plans)
    out = _out(c, None, f"{name}.bits", Bits(nchan), lanes)
    neurons: list[Neuron] = []
    new_terms: list[list[Term]] = []
    for lane, lane_plan in enumerate(plans):
        chan = 0
        lane_terms = []
        for start, form, lo, hi, nbits in lane_plan:
            fns = {}
            for j in range(nbits):
                sig = out.sig(chan, lane)
                fns[sig] = lambda v, j=j: (v >> j) & 1
                lane_terms.append(Term(start + j, out.ch(chan, lane), 0, 1))
                chan += 1
            if hi > lo:
                neurons += craft.piecewise(form, lo, hi, fns)
            elif lo:
                neurons.append(craft.constant({s: fn(lo) for s, fn in fns.items() if fn(lo)}))
        new_terms.append(lane_terms)
    inputs = sorted({f for lane in terms for t in lane for f in t.form.fields()})
    c.mlp("compress", [c.fields[f] for f in inputs], [out], neurons, name=name)
    return new_terms


def max_per_position(terms: list[list[Term]]) -> int:
    counts: dict[tuple[int, int], int] = {}
    for lane, lane_terms in enumerate(terms):
        for t in lane_terms:
            counts[(lane, t.position)] = counts.get((lane, t.position), 0) + t.hi
    return max(counts.values(), default=0)


def _partial_products(
    c: Circuit, a: Field, b: Field, width: int, signed: bool, name: str
) -> list[list[Term]]:
    """M1: column counts C_m as an IntVec field (one channel per column)."""
    n = a.encoding.width
    lanes = _lanes(a, b)
    columns = range(min(width, 2 * n - 1))
    sign = n - 1

    def negative(i: int, j: int) -> bool:
        return signed and ((i == sign) != (j == sign))

    counts = {m: 0 for m in columns}
    const = {m: 0 for m in columns}
    for i in range(n):
        for j in range(n):
            if i + j < width:
                counts[i + j] += 1
                if negative(i, j):
                    const[i + j] += 1  # (1 - x): the 1 part
    if signed:
        for p in (n, 2 * n - 1):  # Baugh-Wooley correction 2^n + 2^(2n-1)
            if p < width:
                const[p] = const.get(p, 0) + 1
                counts[p] = counts.get(p, 0) + 1
    cols = sorted(counts)
    ranges = tuple((0, counts[m]) for m in cols)
    field = _out(c, None, f"{name}.columns", IntVec(ranges), lanes)
    index = {m: k for k, m in enumerate(cols)}
    neurons: list[Neuron] = []
    for lane in range(lanes):
        for i in range(n):
            for j in range(n):
                m = i + j
                if m >= width:
                    continue
                coef = -1 if negative(i, j) else 1
                neurons.append(
                    craft.neuron(
                        _ch(a, i, lane), {field.sig(index[m], lane): coef}, up=_ch(b, j, lane)
                    )
                )
        biases = {field.sig(index[m], lane): v for m, v in const.items() if v}
        if biases:
            neurons.append(craft.constant(biases))
    c.mlp("mul.products", list(dict.fromkeys([a, b])), [field], neurons, name=f"{name}.1")
    return [
        [Term(m, field.ch(index[m], lane), 0, counts[m]) for m in cols] for lane in range(lanes)
    ]


def _operands_to_nibbles(terms: list[list[Term]], nibbles: int, name: str) -> list[list[Lin]]:
    sums = []
    for lane_terms in terms:
        lane_sums = [Lin() for _ in range(nibbles)]
        for t in lane_terms:
            k = t.position // NIBBLE
            if k < nibbles:
                lane_sums[k] = lane_sums[k] + t.form * (1 << (t.position - NIBBLE * k))
        sums.append(lane_sums)
    return sums


REDUCTION_WINDOWS = (1, 3)
"""M2 takes each column alone (window 1), M3 windows of 3 positions: the cheapest pair
that leaves at most two bits per position (window 3 of <= 6 bits: V <= 42, 6 bits wide)."""


def _reduce(c: Circuit, terms: list[list[Term]], width: int, name: str) -> list[list[Term]]:
    for step, window in enumerate(REDUCTION_WINDOWS):
        if max_per_position(terms) <= 2:
            break
        terms = compress(c, terms, window, width, f"{name}.{step + 2}")
    if max_per_position(terms) > 2:
        raise CircuitError(f"{name}: reduction left {max_per_position(terms)} bits per position")
    return terms


def mul_lo_parts(c: Circuit, a: Field, b: Field, name: str | None = None) -> CarrySelect:
    """(a * b) mod 2^w per lane up to its last sublayer (M1-M3, A1): the caller finishes
    the sum with `CarrySelect.select_neurons`, e.g. inside a gather of several units."""
    w = _word(a, "mul")
    if _word(b, "mul") != w:
        raise CircuitError("mul: widths differ")
    label = c.fresh(name or f"mul({a.name},{b.name})")
    terms = _partial_products(c, a, b, w, False, label)
    terms = _reduce(c, terms, w, label)
    sums = _operands_to_nibbles(terms, w // NIBBLE, label)
    inputs = sorted({f for lane in terms for t in lane for f in t.form.fields()})
    return carry_select_parts(c, sums, [c.fields[f] for f in inputs], w, f"{label}.sum")


def mul_lo(c: Circuit, a: Field, b: Field, name: str | None = None) -> Field:
    """(a * b) mod 2^w per lane (signed and unsigned agree). Five sublayers."""
    parts = mul_lo_parts(c, a, b, name)
    label = parts.s0.name.removesuffix(".s0")
    total = _out(c, None, label, Bits(parts.width), parts.s0.lanes)
    c.mlp(
        "add.select",
        parts.fields,
        [total],
        parts.select_neurons(total, in_place=True),
        name=f"{label}.2",
        inplace={total: parts.s0},
    )
    return total


def mul_hi(c: Circuit, a: Field, b: Field, signed: bool = False, name: str | None = None) -> Field:
    """The high w bits of the 2w-bit product per lane (MULHU, or MULHS when `signed`).
    Six sublayers: M1-M3, then a 2w-bit adder whose carry into the high half takes one
    extra sublayer."""
    w = _word(a, "mul_hi")
    if _word(b, "mul_hi") != w:
        raise CircuitError("mul_hi: widths differ")
    label = c.fresh(name or f"mul{'hs' if signed else 'hu'}({a.name},{b.name})")
    terms = _partial_products(c, a, b, 2 * w, signed, label)
    terms = _reduce(c, terms, 2 * w, label)
    sums = _operands_to_nibbles(terms, 2 * w // NIBBLE, label)
    inputs = [
        c.fields[f] for f in sorted({f for lane in terms for t in lane for f in t.form.fields()})
    ]
    return _high_half_add(c, sums, inputs, w, f"{label}.sum")


def _high_half_add(
    c: Circuit, sums: list[list[Lin]], inputs: list[Field], w: int, name: str
) -> Field:
    """The high w bits of sum_k S_k 16^k over 2w/4 nibbles, in three sublayers:
    1. per nibble: sigma_k (all), s0/s1 (high nibbles only);
    2. c_w = [sum_{k<w/4} 2^k sigma_k >= 1], the carry into bit w;
    3. carry into high nibble k: [2 * sum_{w/4<=j<k} 2^(j-w/4) sigma_j + c_w >= 1], and
       the in-place select s0 + carry * (s1 - s0)."""
    lanes = len(sums)
    half = w // NIBBLE
    ranges = _ranges(c)
    s0 = _out(c, None, f"{name}.s0", Bits(w), lanes)
    s1 = _out(c, None, f"{name}.s1", Bits(w), lanes)
    sigma = _out(c, None, f"{name}.sigma", IntVec(((-1, 1),) * (2 * half - 1)), lanes)

    def status(v: int) -> int:
        return 1 if v >= 16 else (0 if v == 15 else -1)

    neurons: list[Neuron] = []
    for lane in range(lanes):
        for k in range(2 * half):
            fns = {}
            if k < 2 * half - 1:
                fns[sigma.sig(k, lane)] = status
            if k >= half:
                for i in range(NIBBLE):
                    fns[s0.sig(NIBBLE * (k - half) + i, lane)] = lambda v, i=i: (v >> i) & 1
                    fns[s1.sig(NIBBLE * (k - half) + i, lane)] = lambda v, i=i: ((v + 1) >> i) & 1
            s = sums[lane][k]
            lo, hi = (int(v) for v in s.bounds(ranges))
            if lo < 0 or hi > 31:
                raise CircuitError(f"{name}: nibble sum range [{lo}, {hi}] not in [0, 31]")
            if hi > lo:
                neurons += craft.piecewise(s, lo, hi, fns)
    c.mlp("add.nibbles", inputs, [s0, s1, sigma], neurons, name=f"{name}.1")

    carry = _out(c, None, f"{name}.cw", Bits(1), lanes)
    neurons = []
    for lane in range(lanes):
        t = sum((sigma.ch(j, lane) * (1 << j) for j in range(half)), Lin())
        neurons += craft.step_ge(t, 1, {carry.sig(0, lane): 1})
    c.mlp("add.carry", [sigma], [carry], neurons, name=f"{name}.2")

    total = _out(c, None, name, Bits(w), lanes)
    neurons = []
    for lane in range(lanes):
        for k in range(half, 2 * half):
            t = carry.ch(0, lane) + 2 * sum(
                (sigma.ch(j, lane) * (1 << (j - half)) for j in range(half, k)), Lin()
            )
            for i in range(NIBBLE):
                bit = NIBBLE * (k - half) + i
                delta = s1.ch(bit, lane) - s0.ch(bit, lane)
                neurons.append(craft.neuron(t, {total.sig(bit, lane): 1}, up=delta))
                neurons.append(craft.neuron(t - 1, {total.sig(bit, lane): -1}, up=delta))
    c.mlp(
        "add.select",
        [s0, s1, sigma, carry],
        [total],
        neurons,
        name=f"{name}.3",
        inplace={total: s0},
    )
    return total
