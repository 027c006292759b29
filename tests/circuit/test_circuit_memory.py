"""DeltaNet memories through real HF layers: random write/read traffic, both dtypes, prefill,
token-by-token decode and prefill-then-decode, final states, duplication, wide rows."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from circuit_helpers import DTYPES, MEMWIDE, ODD, TINY2, model_for
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from qwengpu.circuit import TINY, Bit, Bits, Circuit, Column, OneHot, compile_circuit
from qwengpu.errors import CircuitError

MODES = ("prefill", "decode", "split")
ROWS = 16


@cache
def register_file(geometry=TINY2):
    """A 16-row memory of two 8-bit lanes; reads feed an adder (a later layer)."""
    c = Circuit("regfile")
    wa = c.input("wa", Bits(4))
    d = c.input("d", Bits(8), lanes=2)
    we = c.input("we", Bit())
    ra = c.input("ra", Bits(4))
    re = c.input("re", Bit())
    mem = c.memory("regs", ROWS, [Column("val", Bits(8), 2)])
    c.write(mem, wa, [d], when=we)
    r = c.read(mem, ra, when=re, valid=True)
    total = c.add(r.outputs[0], d)
    c.output(r.outputs[0], r.valid, total)
    return compile_circuit(c, geometry, pad_to_pattern=False), r, total


def reference(wa, d, we, ra, re):
    """What the memory must return: rows as last written (before or on this token)."""
    batch, tokens = wa.shape
    out = np.zeros((batch, tokens, 2), dtype=np.int64)
    valid = np.zeros((batch, tokens), dtype=np.int64)
    for b in range(batch):
        rows: dict[int, np.ndarray] = {}
        for t in range(tokens):
            if we[b, t]:
                rows[int(wa[b, t])] = d[b, t]
            if re[b, t] and int(ra[b, t]) in rows:
                out[b, t] = rows[int(ra[b, t])]
                valid[b, t] = 1
    return out, valid


def traffic(rng, batch, tokens):
    return (
        rng.integers(0, ROWS, (batch, tokens)),
        rng.integers(0, 256, (batch, tokens, 2)),
        rng.integers(0, 2, (batch, tokens)),
        rng.integers(0, ROWS, (batch, tokens)),
        rng.integers(0, 2, (batch, tokens)),
    )


def test_register_file_all_paths_and_states():
    compiled, read, total = register_file()
    rng = np.random.default_rng(7)
    tokens = 40  # the CPU's bf16 depthwise conv makes every decode step slow: keep it short
    wa, d, we, ra, re = traffic(rng, 3, tokens)
    want, want_valid = reference(wa, d, we, ra, re)
    embeds = compiled.embed({"wa": wa, "d": d, "we": we, "ra": ra, "re": re})
    for dtype in DTYPES:
        model = model_for(compiled, dtype)
        states = []
        for mode in MODES:
            residual, cache = model.run(embeds=embeds, mode=mode, split=29, return_cache=True)
            assert np.array_equal(compiled.decode(residual, read.outputs[0]), want), (dtype, mode)
            assert np.array_equal(compiled.decode(residual, read.valid)[..., 0], want_valid)
            assert np.array_equal(compiled.decode(residual, total), (want + d) % 256)
            compiled.check_residual(residual)
            states.append(model.recurrent_states(cache))
        # the final state is the same whichever kernel wrote it, and holds the rows
        for other in states[1:]:
            for layer, s in states[0].items():
                assert np.array_equal(s, other[layer]), (dtype, layer)
        rows = compiled.memory_rows(states[0], "regs")
        for b in range(3):
            last = {}
            for t in range(tokens):
                if we[b, t]:
                    last[int(wa[b, t])] = d[b, t]
            for r in range(ROWS):
                bits = rows[b, r].reshape(2, 8)
                value = (bits * (1 << np.arange(8))).sum(axis=1)
                assert np.array_equal(value, last.get(r, np.zeros(2, dtype=np.int64)))


@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(st.integers(0, 2**32 - 1))
def test_register_file_random_traffic(seed):
    compiled, read, _ = register_file()
    rng = np.random.default_rng(seed)
    wa, d, we, ra, re = traffic(rng, 4, 16)
    want, want_valid = reference(wa, d, we, ra, re)
    embeds = compiled.embed({"wa": wa, "d": d, "we": we, "ra": ra, "re": re})
    for dtype in DTYPES:
        for mode in ("prefill", "decode"):
            residual = model_for(compiled, dtype).run(embeds=embeds, mode=mode)
            assert np.array_equal(compiled.decode(residual, read.outputs[0]), want)
            assert np.array_equal(compiled.decode(residual, read.valid)[..., 0], want_valid)


@cache
def pointer_chase():
    """Two reads of one memory at different depths: the second address is the first
    read's value, so the scheduler makes a second copy in a later layer. The memory is
    wider than one head (160 channels: two value heads)."""
    c = Circuit("chase")
    wa = c.input("wa", OneHot(8))
    d = c.input("d", Bits(3))
    payload = c.input("p", Bits(157))
    we = c.input("we", Bit())
    ra = c.input("ra", Bits(3))
    mem = c.memory("table", 8, [Column("next", Bits(3)), Column("payload", Bits(157))])
    c.write(mem, wa, [d, payload], when=we)
    first = c.read(mem, ra)
    second = c.read(mem, first.outputs[0])
    c.output(first.outputs[0], second.outputs[0], second.outputs[1])
    return compile_circuit(c, MEMWIDE, pad_to_pattern=False), first, second


def test_duplicated_memory_and_wide_rows():
    compiled, first, second = pointer_chase()
    layers = {s.memory.name: [] for p in compiled.schedule.layers for s in p.slots}
    for p in compiled.schedule.layers:
        for s in p.slots:
            layers[s.memory.name].append((p.index, len(s.value_heads)))
    assert layers["table"] == [(0, 2), (1, 2)]  # one copy per depth, two heads each
    rng = np.random.default_rng(3)
    batch, tokens = 2, 24
    wa = rng.integers(0, 8, (batch, tokens))
    d = rng.integers(0, 8, (batch, tokens))
    pay = rng.integers(0, 2, (batch, tokens, 157))
    we = (rng.random((batch, tokens)) < 0.6).astype(int)
    we[:, :8] = 1
    wa[:, :8] = np.arange(8)
    ra = rng.integers(0, 8, (batch, tokens))
    embeds = compiled.embed({"wa": wa, "d": d, "we": we, "ra": ra}, shape=(batch, tokens))
    bits = compiled.schedule.dims["p"]
    embeds[..., bits] = pay
    want1 = np.zeros((batch, tokens), dtype=np.int64)
    want2 = np.zeros((batch, tokens), dtype=np.int64)
    want_pay = np.zeros((batch, tokens, 157), dtype=np.int64)
    for b in range(batch):
        nxt, pl = {}, {}
        for t in range(tokens):
            if we[b, t]:
                nxt[int(wa[b, t])], pl[int(wa[b, t])] = int(d[b, t]), pay[b, t]
            want1[b, t] = nxt.get(int(ra[b, t]), 0)
            want2[b, t] = nxt.get(want1[b, t], 0)
            want_pay[b, t] = pl.get(want1[b, t], 0)
    for dtype in DTYPES:
        for mode in ("prefill", "decode"):
            residual = model_for(compiled, dtype).run(embeds=embeds, mode=mode)
            assert np.array_equal(compiled.decode(residual, first.outputs[0])[..., 0], want1)
            assert np.array_equal(compiled.decode(residual, second.outputs[0])[..., 0], want2)
            got_pay = compiled.channels(residual, second.outputs[1])[..., 0, :]
            assert np.array_equal(got_pay, want_pay), (dtype, mode)
            compiled.check_residual(residual)


def test_read_modify_write_on_one_token_is_rejected():
    c = Circuit("rmw")
    a = c.input("a", Bits(2))
    mem = c.memory("m", 4, [Column("v", Bits(4))])
    r = c.read(mem, a)
    c.write(mem, a, [c.not_(r.outputs[0])])
    with pytest.raises(CircuitError, match="write it back on a later token"):
        compile_circuit(c, TINY)


def test_two_writes_to_one_memory_are_rejected():
    c = Circuit("two")
    a = c.input("a", Bits(2))
    v = c.input("v", Bits(4))
    mem = c.memory("m", 4, [Column("v", Bits(4))])
    c.write(mem, a, [v])
    c.write(mem, a, [v])
    with pytest.raises(CircuitError, match="merge them"):
        compile_circuit(c, TINY)


def test_grouped_value_heads_and_ten_anchors():
    """Two value heads per key head and a 640-wide residual with ten anchors."""
    compiled, read, total = register_file(ODD)
    assert compiled.schedule.anchors.count == 10
    slot = compiled.schedule.layers[0].slots[0]
    assert slot.value_heads == [2 * slot.key_heads[0]]
    rng = np.random.default_rng(2)
    wa, d, we, ra, re = traffic(rng, 2, 24)
    want, _ = reference(wa, d, we, ra, re)
    embeds = compiled.embed({"wa": wa, "d": d, "we": we, "ra": ra, "re": re})
    for dtype in DTYPES:
        for mode in ("prefill", "decode"):
            residual = model_for(compiled, dtype).run(embeds=embeds, mode=mode)
            assert np.array_equal(compiled.decode(residual, read.outputs[0]), want)
            assert np.array_equal(compiled.decode(residual, total), (want + d) % 256)
            compiled.check_residual(residual)
