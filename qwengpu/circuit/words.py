"""Word-level primitives over N lanes: add, subtract, compare, shifts, bitwise ops.

Words are `Bits(32)` fields (any width that is a multiple of 4 works for add/compare);
every op works lane by lane. The adder is a nibble carry-select adder in two sublayers:

  1. per nibble k: S_k = A_k + B_k (+ carry-in at k = 0), an integer in [0, 31]. A ReLU
     basis over S_k gives s0 = S_k mod 16, s1 = (S_k + 1) mod 16 and the status
     sigma_k = +1 (generate, S_k >= 16), 0 (propagate, S_k == 15), -1 (kill).
  2. the carry into nibble k is [T_k >= 1] with T_k = sum_{j<k} 2^j sigma_j: the highest
     non-propagating nibble below k decides, and its weight 2^j outweighs all lower ones
     together. The sum is s0 + carry * (s1 - s0), written in place into s0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qwengpu.circuit import craft
from qwengpu.circuit.craft import Lin, Neuron
from qwengpu.circuit.encodings import Bit, Bits, Ints
from qwengpu.circuit.ir import Field
from qwengpu.circuit.logic import _ch, _lanes, _out, and_, match_form, or_, xor
from qwengpu.errors import CircuitError
from qwengpu.isa.instr import Cond

if TYPE_CHECKING:
    from qwengpu.circuit.ir import Circuit

NIBBLE = 4


def _word(x: Field, what: str) -> int:
    if not isinstance(x.encoding, Bits) or x.encoding.width % NIBBLE:
        raise CircuitError(f"{what}: {x.name!r} must be Bits(4k), is {x.encoding}")
    return x.encoding.width


def _nibble(x: Field, k: int, lane: int, invert: bool = False, flip_top: bool = False) -> Lin:
    """The value of nibble k (optionally of ~x, optionally with the word's top bit flipped)."""
    total = Lin()
    top = x.encoding.width - 1
    for i in range(NIBBLE):
        bit_index = NIBBLE * k + i
        b = _ch(x, bit_index, lane)
        if invert:
            b = 1 - b
        if flip_top and bit_index == top:
            b = 1 - b
        total = total + b * (1 << i)
    return total


@dataclass(frozen=True)
class CarrySelect:
    """A carry-select sum after its first sublayer: per nibble s0 = S_k mod 16,
    s1 = (S_k + 1) mod 16 (nibbles 1 and up) and the status sigma_k. `select_neurons`
    finishes it: sum = s0 + carry * (s1 - s0)."""

    s0: Field
    s1: Field | None
    sigma: Field | None
    width: int
    operands: tuple[Field, ...] = ()  # what the first sublayer read

    @property
    def fields(self) -> list[Field]:
        return [f for f in (self.s0, self.s1, self.sigma) if f is not None]

    def carry_form(self, k: int, lane: int) -> Lin:
        """T_k = sum_{j<k} 2^j sigma_j: the carry into nibble k is [T_k >= 1]."""
        return sum((self.sigma.ch(j, lane) * (1 << j) for j in range(k)), Lin())  # type: ignore[union-attr]

    def select_neurons(
        self, out: Field, gate: Lin | None = None, in_place: bool = False
    ) -> list[Neuron]:
        """Neurons writing the sum into `out` (Bits(width), s0's lanes). In place (out takes
        over s0's channels) they add carry * (s1 - s0); else s0 too. With `gate` (a 0/1
        form; <= 0 off) they write only where it is 1, and 0 elsewhere (not in place)."""
        if in_place and gate is not None:
            raise CircuitError("carry select: a gated sum cannot be written in place over s0")
        n = self.width // NIBBLE
        # a gate off pushes every carry form T_k (|T_k| < 2^(n-1)) below zero
        off = (gate - 1) * (1 << (n - 1)) if gate is not None else Lin()
        neurons: list[Neuron] = []
        for lane in range(self.s0.lanes):
            if not in_place:
                for i in range(self.width):
                    up = self.s0.ch(i, lane)
                    o = {out.sig(i, lane): 1}
                    neurons.append(
                        craft.neuron(gate, o, up=up)
                        if gate is not None
                        else craft.neuron(Lin.of(1), o, up=up)
                    )
            for k in range(1, n):
                t = self.carry_form(k, lane) + off
                for i in range(NIBBLE):
                    delta = self.s1.ch(NIBBLE * (k - 1) + i, lane) - self.s0.ch(
                        NIBBLE * k + i, lane
                    )  # type: ignore[union-attr]
                    o = {out.sig(NIBBLE * k + i, lane): 1}
                    # carry * delta = (max(T, 0) - max(T - 1, 0)) * delta
                    neurons.append(craft.neuron(t, o, up=delta))
                    neurons.append(craft.neuron(t - 1, {sg: -v for sg, v in o.items()}, up=delta))
        return neurons


def carry_select_parts(
    c: Circuit,
    nibble_sums: list[list[Lin]],
    inputs: list[Field],
    width: int,
    name: str,
    carry_out: bool = False,
) -> CarrySelect:
    """The first sublayer of a carry-select sum of per-nibble integer forms S_k in
    [0, 31] whose value is sum_k S_k 16^k (mod 2^width). `nibble_sums[lane][k]`."""
    lanes = len(nibble_sums)
    n = width // NIBBLE
    ranges = _ranges(c)
    for lane_sums in nibble_sums:
        for s in lane_sums:
            lo, hi = s.bounds(ranges)
            if lo < 0 or hi > 31:
                raise CircuitError(f"{name}: nibble sum {s} spans [{lo}, {hi}], not in [0, 31]")
    n_sigma = n if carry_out else n - 1
    s0 = _out(c, None, f"{name}.s0", Bits(width), lanes)
    s1 = _out(c, None, f"{name}.s1", Bits(width - NIBBLE), lanes) if n > 1 else None
    sigma = _out(c, None, f"{name}.sigma", Ints(n_sigma, -1, 1), lanes) if n_sigma else None

    def sum_bit(i: int, plus: int):
        return lambda v: ((v + plus) >> i) & 1

    def status(v: int) -> int:
        return 1 if v >= 16 else (0 if v == 15 else -1)

    neurons: list[Neuron] = []
    for lane in range(lanes):
        for k in range(n):
            fns = {s0.sig(NIBBLE * k + i, lane): sum_bit(i, 0) for i in range(NIBBLE)}
            if k >= 1 and s1 is not None:
                fns.update(
                    {s1.sig(NIBBLE * (k - 1) + i, lane): sum_bit(i, 1) for i in range(NIBBLE)}
                )
            if sigma is not None and k < n_sigma:
                fns[sigma.sig(k, lane)] = status
            lo, hi = (int(v) for v in nibble_sums[lane][k].bounds(ranges))
            neurons += craft.piecewise(nibble_sums[lane][k], lo, hi, fns)
    parts = CarrySelect(s0, s1, sigma, width, tuple(inputs))
    c.mlp("add.nibbles", inputs, parts.fields, neurons, name=f"{name}.1")
    return parts


def carry_select_add(
    c: Circuit,
    nibble_sums: list[list[Lin]],
    inputs: list[Field],
    width: int,
    name: str,
    carry_out: bool = False,
) -> tuple[Field, Field | None]:
    """Two-sublayer addition of per-nibble integer forms S_k in [0, 31] whose value is
    sum_k S_k 16^k (mod 2^width). `nibble_sums[lane][k]`. Returns (sum bits, carry-out)."""
    parts = carry_select_parts(c, nibble_sums, inputs, width, name, carry_out)
    lanes, n = parts.s0.lanes, width // NIBBLE
    total = _out(c, None, name, Bits(width), lanes)
    cout = _out(c, None, f"{name}.cout", Bit(), lanes) if carry_out else None
    neurons = parts.select_neurons(total, in_place=True)
    if cout is not None:
        for lane in range(lanes):
            neurons += craft.step_ge(parts.carry_form(n, lane), 1, {cout.sig(0, lane): 1})
    outs = [total] + ([cout] if cout is not None else [])
    c.mlp("add.select", parts.fields, outs, neurons, name=f"{name}.2", inplace={total: parts.s0})
    return total, cout


def _ranges(c: Circuit):
    from qwengpu.circuit.ir import channel_range

    return channel_range(c.fields)


def add(
    c: Circuit, a: Field, b: Field, carry_in: Field | int = 0, name: str | None = None
) -> Field:
    """(a + b + carry_in) mod 2^w per lane. Two sublayers, about 300 + 90 neurons per
    32-bit lane (see module docstring)."""
    w = _word(a, "add")
    if _word(b, "add") != w:
        raise CircuitError(f"add: widths of {a.name} and {b.name} differ")
    lanes = _lanes(a, b)
    inputs = list(dict.fromkeys([a, b]))
    cin: Lin | int = carry_in if isinstance(carry_in, int) else carry_in.ch(0)
    if isinstance(carry_in, Field):
        inputs.append(carry_in)
    sums = [
        [_nibble(a, k, lane) + _nibble(b, k, lane) + (cin if k == 0 else 0) for k in range(w // 4)]
        for lane in range(lanes)
    ]
    total, _ = carry_select_add(c, sums, inputs, w, c.fresh(name or f"add({a.name},{b.name})"))
    return total


def sub(c: Circuit, a: Field, b: Field, name: str | None = None) -> Field:
    """(a - b) mod 2^w per lane: a + ~b + 1 with the same two-sublayer adder."""
    w = _word(a, "sub")
    lanes = _lanes(a, b)
    sums = [
        [
            _nibble(a, k, lane) + _nibble(b, k, lane, invert=True) + (1 if k == 0 else 0)
            for k in range(w // 4)
        ]
        for lane in range(lanes)
    ]
    total, _ = carry_select_add(
        c, sums, list(dict.fromkeys([a, b])), w, c.fresh(name or f"sub({a.name},{b.name})")
    )
    return total


def neg(c: Circuit, a: Field, name: str | None = None) -> Field:
    """(-a) mod 2^w per lane: ~a + 1."""
    w = _word(a, "neg")
    sums = [
        [_nibble(a, k, lane, invert=True) + (1 if k == 0 else 0) for k in range(w // 4)]
        for lane in range(a.lanes)
    ]
    total, _ = carry_select_add(c, sums, [a], w, c.fresh(name or f"neg({a.name})"))
    return total


SIGNED = {Cond.LT: Cond.LO, Cond.LE: Cond.LS, Cond.GT: Cond.HI, Cond.GE: Cond.HS}


def compare(c: Circuit, a: Field, b: Field, cond: Cond, name: str | None = None) -> Field:
    """[a cond b] per lane, for every `Cond` (signed ones compare with the top bits
    flipped, which maps two's complement order onto unsigned order). Two sublayers.

    1. per nibble: S_k = A_k + 15 - B_k (+1 at k = 0), the nibble sums of a - b; a ReLU basis
       gives sigma_k (as in the adder) and, when needed, e_k = [A_k == B_k].
    2. with T = sum_k 2^k sigma_k (|T| <= 255): a >= b (unsigned) iff T >= 1 (the carry out
       of a + ~b + 1); a == b iff sum e_k == n. HS = [T>=1], LO = 1 - HS, EQ = [sum e = n],
       NE = 1 - EQ, HI = HS - EQ, LS = LO + EQ.
    """
    w = _word(a, "compare")
    if _word(b, "compare") != w:
        raise CircuitError("compare: widths differ")
    lanes = _lanes(a, b)
    n = w // NIBBLE
    signed = cond in SIGNED
    ucond = SIGNED.get(cond, cond)
    need_order = ucond in (Cond.LO, Cond.LS, Cond.HI, Cond.HS)
    need_eq = ucond in (Cond.EQ, Cond.NE, Cond.LS, Cond.HI)
    label = c.fresh(name or f"cmp.{cond.value}({a.name},{b.name})")
    sigma = _out(c, None, f"{label}.sigma", Ints(n, -1, 1), lanes) if need_order else None
    eq = _out(c, None, f"{label}.eq", Bits(n), lanes) if need_eq else None
    ranges = _ranges(c)
    neurons: list[Neuron] = []
    for lane in range(lanes):
        for k in range(n):
            flip = signed and k == n - 1
            s = (
                _nibble(a, k, lane, flip_top=flip)
                + _nibble(b, k, lane, invert=True, flip_top=flip)
                + (1 if k == 0 else 0)
            )
            fns = {}
            if sigma is not None:
                fns[sigma.sig(k, lane)] = lambda v: 1 if v >= 16 else (0 if v == 15 else -1)
            if eq is not None:
                target = 16 if k == 0 else 15  # S_k of equal nibbles
                fns[eq.sig(k, lane)] = lambda v, t=target: int(v == t)
            lo, hi = (int(v) for v in s.bounds(ranges))
            neurons += craft.piecewise(s, lo, hi, fns)
    stage = [f for f in (sigma, eq) if f is not None]
    c.mlp("compare.nibbles", list(dict.fromkeys([a, b])), stage, neurons, name=f"{label}.1")

    out = _out(c, None, label, Bit(), lanes)
    neurons = []
    for lane in range(lanes):
        o = out.sig(0, lane)
        t = sum((sigma.ch(k, lane) * (1 << k) for k in range(n)), Lin()) if sigma else None  # type: ignore[union-attr]
        e = sum((eq.ch(k, lane) for k in range(n)), Lin()) if eq else None  # type: ignore[union-attr]
        if ucond is Cond.HS:
            neurons += craft.step_ge(t, 1, {o: 1})
        elif ucond is Cond.LO:
            neurons += [craft.constant({o: 1})] + craft.step_ge(t, 1, {o: -1})
        elif ucond is Cond.EQ:
            neurons.append(craft.relu_of(e - (n - 1), {o: 1}))
        elif ucond is Cond.NE:
            neurons += [craft.constant({o: 1}), craft.relu_of(e - (n - 1), {o: -1})]
        elif ucond is Cond.HI:
            neurons += craft.step_ge(t, 1, {o: 1}) + [craft.relu_of(e - (n - 1), {o: -1})]
        elif ucond is Cond.LS:
            neurons += [craft.constant({o: 1})] + craft.step_ge(t, 1, {o: -1})
            neurons.append(craft.relu_of(e - (n - 1), {o: 1}))
        else:  # pragma: no cover
            raise CircuitError(f"compare: unsupported condition {cond}")
    c.mlp("compare.decide", stage, [out], neurons, name=f"{label}.2")
    return out


# -- shifts -------------------------------------------------------------------------------------

SHIFT_BITS = 5  # a 32-bit word shifts by its amount's low 5 bits; any higher bit means >= 32


def _shift_amount_forms(amount: Field, lane: int, width: int) -> tuple[list[Lin], Lin]:
    """For k = 0..width-1: a form that is 1 when amount == k and <= 0 otherwise (any set
    bit at or above log2(width) pushes it below 0), and the sum of those high bits."""
    aw = amount.encoding.width
    lowbits = max(1, (width - 1).bit_length())
    low = [_ch(amount, i, lane) for i in range(min(lowbits, aw))]
    high = sum((_ch(amount, i, lane) for i in range(lowbits, aw)), Lin())
    forms = []
    for k in range(width):
        if k >> len(low):
            forms.append(None)
            continue
        forms.append(match_form(low, k) - high)
    return forms, high


def _shift(c: Circuit, kind: str, x: Field, amount: Field, name: str | None) -> Field:
    w = _word(x, kind)
    if not isinstance(amount.encoding, Bits | Bit):
        raise CircuitError(f"{kind}: amount {amount.name} must be Bits")
    lanes = _lanes(x, amount)
    out = _out(c, name, f"{kind}({x.name},{amount.name})", Bits(w), lanes)
    neurons: list[Neuron] = []
    for lane in range(lanes):
        forms, high = _shift_amount_forms(amount, lane, w)
        for k, form in enumerate(forms):
            if form is None:
                continue
            for i in range(w):
                src = i - k if kind == "shl" else i + k
                if 0 <= src < w:
                    # out_i += [amount == k] * x_src
                    neurons.append(craft.neuron(form, {out.sig(i, lane): 1}, up=_ch(x, src, lane)))
        if kind == "sra":
            # sign fill: out_i += x_top * [i + amount >= w or amount >= w], i.e.
            # x_top * (1 - [ (w-1-i) - low - w*high >= 0 ]).
            top = _ch(x, w - 1, lane)
            lowbits = max(1, (w - 1).bit_length())
            low_value = sum(
                (
                    _ch(amount, j, lane) * (1 << j)
                    for j in range(min(lowbits, amount.encoding.width))
                ),
                Lin(),
            )
            fill_all = {out.sig(i, lane): 1 for i in range(w)}
            neurons.append(craft.neuron(top, fill_all, up=1))
            for i in range(w):
                keep = (w - 1 - i) - low_value - high * w
                o = {out.sig(i, lane): 1}
                neurons.append(craft.neuron(keep + 1, {s: -v for s, v in o.items()}, up=top))
                neurons.append(craft.neuron(keep, o, up=top))
    c.mlp(kind, list(dict.fromkeys([x, amount])), [out], neurons)
    return out


def shl(c: Circuit, x: Field, amount: Field, name: str | None = None) -> Field:
    """x << amount per lane (0 for amount >= width). One sublayer: a product neuron
    [amount == k] * x_{i-k} for every output bit i and shift k <= i (528 per 32-bit lane)."""
    return _shift(c, "shl", x, amount, name)


def shr(c: Circuit, x: Field, amount: Field, name: str | None = None) -> Field:
    """x >> amount (logical) per lane (0 for amount >= width). One sublayer, 528 neurons."""
    return _shift(c, "shr", x, amount, name)


def sra(c: Circuit, x: Field, amount: Field, name: str | None = None) -> Field:
    """x >> amount (arithmetic) per lane (all sign bits for amount >= width): the logical
    shift plus x_top * [i + amount >= width], two neurons per bit (+1 shared)."""
    return _shift(c, "sra", x, amount, name)


def bit_and(c: Circuit, a: Field, b: Field, name: str | None = None) -> Field:
    """Bitwise AND of two words (one neuron per bit)."""
    return and_(c, a, b, name=name)


def bit_or(c: Circuit, a: Field, b: Field, name: str | None = None) -> Field:
    """Bitwise OR of two words (one neuron per bit + the shared bias)."""
    return or_(c, a, b, name=name)


def bit_xor(c: Circuit, a: Field, b: Field, name: str | None = None) -> Field:
    """Bitwise XOR of two words (two neurons per bit)."""
    return xor(c, a, b, name=name)
