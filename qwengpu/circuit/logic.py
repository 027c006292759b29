"""Bit-level logic primitives: gates, thresholds, equality, lookups, multiplexers,
priority encoders, decoders. One MLP sublayer each unless stated.

Every function takes the circuit first (they are also `Circuit` methods) and returns the
new field. Inputs must be clean (exact integers); outputs are clean. Lanes broadcast: a
one-lane operand combines with every lane of a many-lane operand.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from qwengpu.circuit import craft
from qwengpu.circuit.craft import Lin, Neuron, Sig
from qwengpu.circuit.encodings import Bit, Bits, Encoding, Int, Ints, OneHot
from qwengpu.circuit.ir import Field
from qwengpu.errors import CircuitError

if TYPE_CHECKING:
    from qwengpu.circuit.ir import Circuit


# -- helpers ------------------------------------------------------------------------------


def _lanes(*fields: Field) -> int:
    lanes = {f.lanes for f in fields} - {1}
    if len(lanes) > 1:
        raise CircuitError(f"lane counts differ: {[(f.name, f.lanes) for f in fields]}")
    return lanes.pop() if lanes else 1


def _ch(f: Field, index: int, lane: int) -> Lin:
    """Channel `index` of `f` in `lane` (a one-lane field broadcasts)."""
    return f.ch(index, 0 if f.lanes == 1 else lane)


def _bitlike(f: Field, what: str) -> int:
    if not isinstance(f.encoding, Bit | Bits):
        raise CircuitError(f"{what}: {f.name!r} must be Bit or Bits, is {f.encoding}")
    return f.encoding.width


def _out(c: Circuit, name: str | None, hint: str, encoding: Encoding, lanes: int) -> Field:
    return c.new_field(c.fresh(name or hint), encoding, lanes)


def literal(f: Field, index: int, lane: int, positive: bool) -> Lin:
    """The bit, or its complement 1 - bit."""
    x = _ch(f, index, lane)
    return x if positive else 1 - x


def match_form(bits: Sequence[Lin], pattern: int) -> Lin:
    """An integer form that is 1 exactly when the bits spell `pattern`, and <= 0 otherwise:
    sum of the matching literals minus (n - 1)."""
    n = len(bits)
    lits = [b if (pattern >> i) & 1 else 1 - b for i, b in enumerate(bits)]
    return sum(lits, Lin()) - (n - 1)


# -- gates --------------------------------------------------------------------------------


def not_(c: Circuit, x: Field, name: str | None = None) -> Field:
    """NOT, bitwise: out = 1 - x = max(1 - x, 0). One neuron per bit."""
    w = _bitlike(x, "not")
    out = _out(c, name, f"not({x.name})", x.encoding, x.lanes)
    neurons = [
        craft.relu_of(1 - x.ch(i, lane), {out.sig(i, lane): 1})
        for lane in range(x.lanes)
        for i in range(w)
    ]
    c.mlp("not", [x], [out], neurons)
    return out


def _bitwise(
    c: Circuit, kind: str, xs: Sequence[Field], name: str | None, build: Callable
) -> Field:
    widths = {_bitlike(x, kind) for x in xs}
    if len(widths) != 1:
        raise CircuitError(f"{kind}: operand widths differ: {[x.name for x in xs]}")
    (w,) = widths
    lanes = _lanes(*xs)
    enc = Bits(w) if w > 1 else Bit()
    out = _out(c, name, f"{kind}({','.join(x.name for x in xs)})", enc, lanes)
    neurons: list[Neuron] = []
    for lane in range(lanes):
        for i in range(w):
            total = sum((_ch(x, i, lane) for x in xs), Lin())
            neurons += build(total, len(xs), out.sig(i, lane))
    c.mlp(kind, list(dict.fromkeys(xs)), [out], neurons)
    return out


def and_(c: Circuit, *xs: Field, name: str | None = None) -> Field:
    """AND of n bits: max(sum - (n - 1), 0). One neuron per bit."""
    return _bitwise(c, "and", xs, name, lambda s, n, o: [craft.relu_of(s - (n - 1), {o: 1})])


def or_(c: Circuit, *xs: Field, name: str | None = None) -> Field:
    """OR of n bits: 1 - max(1 - sum, 0) (NOR unit plus the shared bias unit)."""
    return _bitwise(
        c, "or", xs, name, lambda s, n, o: [craft.constant({o: 1}), craft.relu_of(1 - s, {o: -1})]
    )


def xor(c: Circuit, *xs: Field, name: str | None = None) -> Field:
    """XOR (parity) of n bits: a function of the sum on [0, n], n neurons (2 for n = 2)."""
    return _bitwise(
        c, "xor", xs, name, lambda s, n, o: craft.piecewise(s, 0, n, {o: lambda v: v & 1})
    )


def threshold(
    c: Circuit, form: Lin, t: int, name: str | None = None, inputs: Sequence[Field] = ()
) -> Field:
    """[form >= t] for an integer linear form of clean channels: two neurons (one when the
    form never exceeds t, i.e. an AND-like threshold)."""
    ins = _inputs_of(c, form, inputs)
    out = _out(c, name, "threshold", Bit(), 1)
    _, hi = form.bounds(_ranges(c))
    if hi <= t:
        neurons = [craft.relu_of(form - (t - 1), {out.sig(0): 1})]
    else:
        neurons = craft.step_ge(form, t, {out.sig(0): 1})
    c.mlp("threshold", ins, [out], neurons)
    return out


def function(
    c: Circuit,
    form: Lin,
    fn: Callable[[int], int],
    encoding: Encoding,
    name: str | None = None,
    inputs: Sequence[Field] = (),
) -> Field:
    """Any function of an integer linear form, encoded as `encoding`: a ReLU basis with one
    neuron per knot of the form's range (shared by all output channels)."""
    ins = _inputs_of(c, form, inputs)
    lo, hi = (int(v) for v in form.bounds(_ranges(c)))
    out = _out(c, name, "function", encoding, 1)
    fns = {out.sig(i): (lambda v, i=i: encoding.encode(fn(v))[i]) for i in range(encoding.width)}
    c.mlp("function", ins, [out], craft.piecewise(form, lo, hi, fns))
    return out


def _ranges(c: Circuit):
    from qwengpu.circuit.ir import channel_range

    return channel_range(c.fields)


def _inputs_of(c: Circuit, form: Lin, inputs: Sequence[Field]) -> list[Field]:
    names = form.fields()
    found = [c.fields[n] for n in sorted(names)]
    return list(dict.fromkeys([*inputs, *found]))


# -- equality -------------------------------------------------------------------------------


def equal_const(c: Circuit, x: Field, value: int, name: str | None = None) -> Field:
    """[x == value] per lane for Bits/Bit (AND of literals: one neuron) or OneHot (the
    channel itself, copied: one neuron)."""
    out = _out(c, name, f"eq({x.name},{value})", Bit(), x.lanes)
    neurons = []
    for lane in range(x.lanes):
        if isinstance(x.encoding, OneHot):
            form = x.ch(value, lane) if 0 <= value < x.encoding.width else Lin()
        else:
            bits = [x.ch(i, lane) for i in range(_bitlike(x, "equal_const"))]
            if value >> len(bits):
                form = Lin()
            else:
                form = match_form(bits, value)
        if form.terms:
            neurons.append(craft.relu_of(form, {out.sig(0, lane): 1}))
    c.mlp("equal_const", [x], [out], neurons)
    return out


EQ_CHUNK = 8
"""Bits compared per neuron triple: the difference of two 8-bit chunks stays in [-255, 255]."""


def equal(c: Circuit, x: Field, y: Field, name: str | None = None) -> Field:
    """[x == y] per lane.

    Bits: chunks of 8 bits, d = X - Y in [-255, 255]; [d == 0] = r(d+1) - 2 r(d) + r(d-1)
    (3 neurons per chunk); with more than one chunk a second sublayer ANDs them (1 neuron).
    OneHot: sum_i x_i * y_i (one product neuron per channel, one sublayer).
    """
    if x.encoding != y.encoding:
        raise CircuitError(f"equal: {x.name} ({x.encoding}) vs {y.name} ({y.encoding})")
    lanes = _lanes(x, y)
    if isinstance(x.encoding, OneHot):
        out = _out(c, name, f"eq({x.name},{y.name})", Bit(), lanes)
        neurons = [
            craft.neuron(_ch(x, i, lane), {out.sig(0, lane): 1}, up=_ch(y, i, lane))
            for lane in range(lanes)
            for i in range(x.encoding.width)
        ]
        c.mlp("equal", list(dict.fromkeys([x, y])), [out], neurons)
        return out
    w = _bitlike(x, "equal")
    chunks = [(lo, min(lo + EQ_CHUNK, w)) for lo in range(0, w, EQ_CHUNK)]
    single = len(chunks) == 1
    enc = Bit() if single else Bits(len(chunks))
    stage = _out(c, name if single else None, f"eq({x.name},{y.name})", enc, lanes)
    neurons = []
    for lane in range(lanes):
        for k, (lo, hi) in enumerate(chunks):
            d = sum(
                ((_ch(x, i, lane) - _ch(y, i, lane)) * (1 << (i - lo)) for i in range(lo, hi)),
                Lin(),
            )
            o = stage.sig(k, lane)
            neurons += [
                craft.relu_of(d + 1, {o: 1}),
                craft.relu_of(d, {o: -2}),
                craft.relu_of(d - 1, {o: 1}),
            ]
    c.mlp("equal", list(dict.fromkeys([x, y])), [stage], neurons)
    if single:
        return stage
    return and_bits(c, stage, name=name or f"eq({x.name},{y.name})")


def and_bits(c: Circuit, x: Field, name: str | None = None) -> Field:
    """AND of all bits of each lane of x: max(sum - (n - 1), 0). One neuron per lane."""
    w = _bitlike(x, "and_bits")
    out = _out(c, name, f"all({x.name})", Bit(), x.lanes)
    neurons = [
        craft.relu_of(
            sum((x.ch(i, lane) for i in range(w)), Lin()) - (w - 1), {out.sig(0, lane): 1}
        )
        for lane in range(x.lanes)
    ]
    c.mlp("and_bits", [x], [out], neurons)
    return out


def or_bits(c: Circuit, x: Field, name: str | None = None) -> Field:
    """OR of all bits of each lane: 1 - max(1 - sum, 0). One neuron per lane (+ bias)."""
    w = _bitlike(x, "or_bits")
    out = _out(c, name, f"any({x.name})", Bit(), x.lanes)
    neurons: list[Neuron] = []
    for lane in range(x.lanes):
        s = sum((x.ch(i, lane) for i in range(w)), Lin())
        neurons += [
            craft.constant({out.sig(0, lane): 1}),
            craft.relu_of(1 - s, {out.sig(0, lane): -1}),
        ]
    c.mlp("or_bits", [x], [out], neurons)
    return out


# -- tables, multiplexers, encoders ------------------------------------------------------------


def _index_forms(index: Field, lane: int) -> list[Lin]:
    """For each table entry i, a form that is 1 when index == i and <= 0 otherwise."""
    enc = index.encoding
    if isinstance(enc, OneHot):
        return [_ch(index, i, lane) for i in range(enc.width)]
    bits = [_ch(index, i, lane) for i in range(_bitlike(index, "lookup"))]
    return [match_form(bits, i) for i in range(1 << len(bits))]


def _encoded(encoding: Encoding, value: int) -> list[int]:
    return encoding.encode(value)


def lookup(
    c: Circuit,
    index: Field,
    table: Sequence[int],
    encoding: Encoding,
    name: str | None = None,
) -> Field:
    """out = table[index] (a ROM): one neuron per entry, gate = [index == i], its down
    projection writes the encoded entry. Index: OneHot, or Bits (entries beyond the table
    read 0)."""
    out = _out(c, name, f"lookup({index.name})", encoding, index.lanes)
    zero = [0] * encoding.width
    neurons = []
    for lane in range(index.lanes):
        forms = _index_forms(index, lane)
        if len(table) > len(forms):
            raise CircuitError(f"lookup: table of {len(table)} for an index of {len(forms)}")
        for i, value in enumerate(table):
            enc = _encoded(encoding, value)
            if enc == zero:
                continue
            neurons.append(
                craft.relu_of(forms[i], {out.sig(j, lane): v for j, v in enumerate(enc) if v})
            )
    c.mlp("lookup", [index], [out], neurons)
    return out


def decoder(c: Circuit, x: Field, name: str | None = None) -> Field:
    """Bits(k) -> OneHot(2^k): one AND-of-literals neuron per output."""
    w = _bitlike(x, "decoder")
    return lookup(c, x, list(range(1 << w)), OneHot(1 << w), name=name or f"dec({x.name})")


def encoder(c: Circuit, x: Field, name: str | None = None) -> Field:
    """OneHot(n) -> Bits(ceil log2 n): output bit k = sum of the one-hot channels whose
    index has bit k (one pass-through neuron per output bit; 0 for an all-zero input)."""
    if not isinstance(x.encoding, OneHot):
        raise CircuitError(f"encoder: {x.name} must be OneHot")
    n = x.encoding.width
    k = max(1, (n - 1).bit_length())
    out = _out(c, name, f"enc({x.name})", Bits(k), x.lanes)
    neurons = []
    for lane in range(x.lanes):
        for b in range(k):
            s = sum((x.ch(i, lane) for i in range(n) if (i >> b) & 1), Lin())
            if s.terms:
                neurons.append(craft.relu_of(s, {out.sig(b, lane): 1}))
    c.mlp("encoder", [x], [out], neurons)
    return out


def mux(c: Circuit, sel: Field, a: Field, b: Field, name: str | None = None) -> Field:
    """sel ? a : b, channel-wise: max(sel,0)*a + max(1-sel,0)*b (2 product neurons per
    channel; works for any integer channels, |v| <= 256)."""
    if not isinstance(sel.encoding, Bit):
        raise CircuitError(f"mux: selector {sel.name} must be a Bit")
    if a.encoding != b.encoding:
        raise CircuitError(f"mux: {a.name} ({a.encoding}) vs {b.name} ({b.encoding})")
    lanes = _lanes(sel, a, b)
    out = _out(c, name, f"mux({sel.name})", a.encoding, lanes)
    neurons: list[Neuron] = []
    for lane in range(lanes):
        s = _ch(sel, 0, lane)
        for i in range(a.encoding.width):
            o = {out.sig(i, lane): 1}
            neurons.append(craft.neuron(s, o, up=_ch(a, i, lane)))
            neurons.append(craft.neuron(1 - s, o, up=_ch(b, i, lane)))
    c.mlp("mux", list(dict.fromkeys([sel, a, b])), [out], neurons)
    return out


def select(c: Circuit, sel: Field, options: Sequence[Field], name: str | None = None) -> Field:
    """options[sel] for a OneHot selector: one product neuron per option and channel."""
    if not isinstance(sel.encoding, OneHot) or sel.encoding.width < len(options):
        raise CircuitError(f"select: {sel.name} must be OneHot with >= {len(options)} channels")
    encs = {o.encoding for o in options}
    if len(encs) != 1:
        raise CircuitError("select: options differ in encoding")
    (enc,) = encs
    lanes = _lanes(sel, *options)
    out = _out(c, name, f"select({sel.name})", enc, lanes)
    neurons = [
        craft.neuron(_ch(sel, k, lane), {out.sig(i, lane): 1}, up=_ch(opt, i, lane))
        for lane in range(lanes)
        for k, opt in enumerate(options)
        for i in range(enc.width)
    ]
    c.mlp("select", list(dict.fromkeys([sel, *options])), [out], neurons)
    return out


def priority(
    c: Circuit,
    x: Field,
    lowest: bool = True,
    onehot: bool = True,
    name: str | None = None,
) -> tuple[Field, Field]:
    """Priority encoder: the lowest (or highest) set bit of each lane, and whether any bit
    is set. first_i = max(x_i - sum of the bits before it, 0): one neuron per bit; the
    index (OneHot or Bits) and `any` are linear in these units (down projection only)."""
    w = _bitlike(x, "priority")
    enc: Encoding = OneHot(w, allow_none=True) if onehot else Bits(max(1, (w - 1).bit_length()))
    out = _out(c, name, f"prio({x.name})", enc, x.lanes)
    anyf = _out(c, None, f"{out.name}.any", Bit(), x.lanes)
    neurons = []
    for lane in range(x.lanes):
        for i in range(w):
            before = range(i) if lowest else range(i + 1, w)
            form = x.ch(i, lane) - sum((x.ch(j, lane) for j in before), Lin())
            o: dict[Sig, int] = {anyf.sig(0, lane): 1}
            if onehot:
                o[out.sig(i, lane)] = 1
            else:
                o.update({out.sig(b, lane): 1 for b in range(enc.width) if (i >> b) & 1})
            neurons.append(craft.relu_of(form, o))
    c.mlp("priority", [x], [out, anyf], neurons)
    return out, anyf


# -- conversions ---------------------------------------------------------------------------------


def copy(c: Circuit, x: Field, name: str | None = None) -> Field:
    """A copy of x: out = max(x - lo, 0) + lo per channel (one neuron each, + bias)."""
    out = _out(c, name, f"copy({x.name})", x.encoding, x.lanes)
    ranges = _ranges(c)
    neurons: list[Neuron] = []
    for s_in, s_out in zip(x.sigs(), out.sigs(), strict=True):
        lo, _ = ranges(s_in)
        neurons.append(craft.relu_of(Lin({s_in: 1}) - lo, {s_out: 1}))
        if lo:
            neurons.append(craft.constant({s_out: lo}))
    c.mlp("copy", [x], [out], neurons)
    return out


def popcount(c: Circuit, x: Field, name: str | None = None) -> Field:
    """Number of set bits of each lane as Int(0, n): one pass-through neuron per lane."""
    w = _bitlike(x, "popcount")
    out = _out(c, name, f"popc({x.name})", Int(0, w), x.lanes)
    neurons = [
        craft.relu_of(sum((x.ch(i, lane) for i in range(w)), Lin()), {out.sig(0, lane): 1})
        for lane in range(x.lanes)
    ]
    c.mlp("popcount", [x], [out], neurons)
    return out


def to_bits(c: Circuit, x: Field, width: int | None = None, name: str | None = None) -> Field:
    """An Int(lo, hi) channel (per lane) as Bits: a ReLU basis over [lo, hi]."""
    if not isinstance(x.encoding, Int):
        raise CircuitError(f"to_bits: {x.name} must be Int")
    lo, hi = x.encoding.lo, x.encoding.hi
    if lo < 0:
        raise CircuitError("to_bits: negative integers are not supported")
    width = width or max(1, hi.bit_length())
    out = _out(c, name, f"bits({x.name})", Bits(width), x.lanes)
    neurons: list[Neuron] = []
    for lane in range(x.lanes):
        fns = {out.sig(i, lane): (lambda v, i=i: (v >> i) & 1) for i in range(width)}
        neurons += craft.piecewise(x.ch(0, lane), lo, hi, fns)
    c.mlp("to_bits", [x], [out], neurons)
    return out


def ints(c: Circuit, forms: Sequence[Lin], lo: int, hi: int, name: str | None = None) -> Field:
    """Materialise integer linear forms (each in [lo, hi], lo >= 0 or via bias) as an Ints
    field: out_i = max(form_i - lo, 0) + lo."""
    out = _out(c, name, "ints", Ints(len(forms), lo, hi), 1)
    neurons: list[Neuron] = []
    for i, form in enumerate(forms):
        neurons.append(craft.relu_of(form - lo, {out.sig(i): 1}))
        if lo:
            neurons.append(craft.constant({out.sig(i): lo}))
    c.mlp(
        "ints",
        [c.fields[n] for n in sorted(set().union(*(f.fields() for f in forms)))],
        [out],
        neurons,
    )
    return out


__all__ = [
    "and_",
    "and_bits",
    "copy",
    "decoder",
    "encoder",
    "equal",
    "equal_const",
    "function",
    "literal",
    "lookup",
    "match_form",
    "mux",
    "not_",
    "or_",
    "or_bits",
    "popcount",
    "priority",
    "select",
    "threshold",
    "to_bits",
    "xor",
    "ints",
]
