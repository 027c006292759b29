"""Scheduler and allocator: placement, capacity errors, dim reuse, layer patterns, reports.
These need no torch (schedules are pure Python)."""

from __future__ import annotations

import pytest

from qwengpu.circuit import (
    QWEN35_0_8B,
    QWEN35_2B,
    TINY,
    Bit,
    Bits,
    Circuit,
    Column,
    schedule,
)
from qwengpu.circuit.geometry import FULL, LINEAR
from qwengpu.circuit.numerics import BF16_EXACT_INT
from qwengpu.errors import CircuitError


def chain(n: int, lanes: int = 1) -> Circuit:
    """n dependent NOTs: one layer each."""
    c = Circuit("chain")
    x = c.input("x", Bits(8), lanes=lanes)
    for _ in range(n):
        x = c.not_(x)
    c.output(x)
    return c


def test_dependencies_set_the_depth_and_the_base_pattern_is_kept():
    s = schedule(chain(5), TINY)
    assert s.layers_used == 5
    assert s.num_layers == 8  # padded to the pattern
    assert s.layer_types == [LINEAR, LINEAR, LINEAR, FULL] * 2
    assert [s.op_layer[op.name] for op in s.circuit.ops] == [
        0,
        1,
        2,
        3,
        4,
    ]  # MLP of a full layer used
    flat = schedule(chain(5), TINY, keep_base_pattern=False)
    assert flat.layer_types == [LINEAR] * 5


def test_dead_fields_are_cleared_and_their_dims_reused():
    s = schedule(chain(6), TINY, pad_to_pattern=False)
    # only two 8-bit fields are ever live (input/output of one NOT), so dims are reused
    assert max(s.live_dims) == 8
    assert len({tuple(d) for d in s.dims.values()}) <= 2
    assert all(plan.cleared for plan in s.layers)


def test_independent_ops_share_a_layer_until_it_is_full():
    c = Circuit("wide")
    a = c.input("a", Bits(32), lanes=4)
    b = c.input("b", Bits(32), lanes=4)
    d = c.input("d", Bits(32), lanes=4)
    outs = [c.xor(a, b), c.xor(a, d), c.xor(b, d)]  # 256 neurons each
    same = [c.xor(a, b), c.xor(a, b)]  # identical neurons are shared, not duplicated
    outs += same
    c.output(*outs)
    s = schedule(c, TINY.with_layers(name="t", hidden=2048), pad_to_pattern=False)
    assert s.layers_used == 1
    small = TINY.with_layers(name="narrow", hidden=2048, intermediate=600)
    s2 = schedule(c, small, pad_to_pattern=False)
    assert [s2.op_layer[op.name] for op in c.ops] == [0, 0, 1, 0, 0]
    assert all(p.neuron_count <= 600 for p in s2.layers)


def test_mlp_width_error_names_op_and_resource():
    c = Circuit("inseparable")
    a = c.input("a", Bits(8))
    c.output(c.function(a.value(), lambda v: v % 7, Bits(3)))  # 255 knots shared by 3 bits
    tiny = TINY.with_layers(name="t", intermediate=100)
    with pytest.raises(
        CircuitError, match=r"op 'function' \(function\) needs 255 MLP neurons.*MLP width"
    ):
        schedule(c, tiny)


def test_big_separable_ops_are_split_over_layers():
    c = Circuit("split")
    x = c.input("x", Bits(32), lanes=4)
    y = c.input("y", Bits(32), lanes=4)
    out = c.shl(x, y)
    c.output(out)
    narrow = QWEN35_0_8B.with_layers(name="narrow", intermediate=1024)
    s = schedule(c, narrow, pad_to_pattern=False)
    assert s.layers_used == 3  # 2112 neurons, independent per output bit
    assert all(p.neuron_count <= 1024 for p in s.layers)


def test_residual_error_names_op_and_resource():
    c = Circuit("fat")
    a = c.input("a", Bits(100))
    b = c.input("b", Bits(100))
    c.output(a, b, c.xor(a, b))  # a and b stay: no room for the result
    with pytest.raises(
        CircuitError, match=r"op 'xor\(a,b\)' needs 100 residual dims.*residual width 256"
    ):
        schedule(c, TINY)


def test_max_layers_error():
    with pytest.raises(CircuitError, match="limited to 3 layers"):
        schedule(chain(5), TINY, max_layers=3)


def test_head_capacity_error_and_spill_to_next_layer():
    c = Circuit("heads")
    a = c.input("a", Bits(4))
    v = c.input("v", Bits(40))  # 120 cleaning neurons per read
    outs = []
    for k in range(6):  # six one-head memories, TINY has 4 heads per layer
        mem = c.memory(f"m{k}", 16, [Column("v", Bits(40))])
        c.write(mem, a, [v])
        outs.append(c.read(mem, a).outputs[0])
    s = schedule(c, TINY.with_layers(name="t", hidden=2048), pad_to_pattern=False)
    per_layer = [len(p.slots) for p in s.layers]
    assert per_layer[:2] == [4, 2]
    c2 = Circuit("one memory too wide")
    a2 = c2.input("a", Bits(4))
    v2 = c2.input("v", Bits(600))
    mem = c2.memory("big", 16, [Column("v", Bits(600))])
    c2.write(mem, a2, [v2])
    with pytest.raises(CircuitError, match="memory 'big' needs 5 value heads.*resource: heads"):
        schedule(c2, TINY.with_layers(name="t", hidden=2048))


def test_memory_only_in_linear_layers():
    c = Circuit("late memory")
    x = c.input("x", Bits(4))
    for _ in range(3):
        x = c.not_(x)  # ready at layer 3, a full-attention layer
    mem = c.memory("m", 16, [Column("v", Bits(4))])
    c.write(mem, x, [x])
    r = c.read(mem, x)
    c.output(r.outputs[0])
    s = schedule(c, TINY)
    assert s.op_layer[r.name] == 4
    assert s.layers[4].kind == LINEAR


def test_utilisation_report():
    c = Circuit("adder")
    a = c.input("a", Bits(32), lanes=4)
    b = c.input("b", Bits(32), lanes=4)
    c.output(c.add(a, b))
    s = schedule(c, QWEN35_2B)
    rows = s.utilisation()
    assert rows[0]["neurons"] > 0 and rows[0]["neurons_total"] == 6144
    assert rows[0]["residual_total"] == 2048
    text = s.report()
    assert "add(a,b).1" in text and "2 layers used of 4" in text


def test_inplace_input_cannot_be_read_afterwards():
    c = Circuit("inplace")
    a = c.input("a", Bits(32))
    b = c.input("b", Bits(32))
    s = c.add(a, b)
    s0 = next(f for f in c.fields.values() if f.name.endswith(".s0"))
    with pytest.raises(CircuitError, match="updated in place"):
        c.not_(s0)
    assert s.encoding == Bits(32)


def test_neuron_validation_rejects_inexact_units():
    c = Circuit("bad")
    a = c.input("a", Bits(9))
    with pytest.raises(CircuitError, match=f"> {BF16_EXACT_INT}"):
        c.threshold(a.value(), 100)  # the gate reaches 511 - 99: not bf16-exact


def test_unmuteable_layouts_keep_mute_dims():
    s = schedule(chain(1), TINY, min_mute_dims=100)
    assert len(s.mute_dims()) >= 100
    with pytest.raises(CircuitError):
        schedule(chain(1), TINY, min_mute_dims=250)


def test_cycle_error():
    c = Circuit("cycle")
    x = c.input("x", Bit())
    mem = c.memory("m", 2, [Column("v", Bit())])
    r = c.read(mem, x)
    c.write(mem, x, [c.not_(r.outputs[0])])
    with pytest.raises(CircuitError, match="dependency cycle"):
        schedule(c, TINY)


def test_read_too_wide_to_clean_is_an_error():
    c = Circuit("wide read")
    a = c.input("a", Bits(4))
    v = c.input("v", Bits(400))
    mem = c.memory("m", 16, [Column("v", Bits(400))])
    c.write(mem, a, [v])
    c.output(c.read(mem, a).outputs[0])
    with pytest.raises(CircuitError, match="needs 1200 MLP neurons to clean"):
        schedule(c, TINY.with_layers(name="t", hidden=4096))
