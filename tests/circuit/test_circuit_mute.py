"""Muting: text tokens pass every circuit layer bit-identical, and never touch the state."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch
from circuit_helpers import DTYPES, TINY2

from qwengpu.circuit import (
    Bit,
    Bits,
    Circuit,
    Column,
    MuteError,
    compile_circuit,
    synthetic_embedding,
)
from qwengpu.circuit.runtime import CircuitModel

VOCAB = 3000
N_CIRCUIT = 48


def build() -> tuple[Circuit, object, object]:
    c = Circuit("muted")
    wa = c.input("wa", Bits(3))
    d = c.input("d", Bits(8))
    we = c.input("we", Bit())
    ra = c.input("ra", Bits(3))
    mem = c.memory("m", 8, [Column("v", Bits(8))])
    c.write(mem, wa, [d], when=we)
    r = c.read(mem, ra)
    s = c.add(r.outputs[0], d)
    c.output(r.outputs[0], s)
    return c, r, s


@cache
def muted():
    c, r, s = build()
    embedding = synthetic_embedding(VOCAB, TINY2.hidden, seed=11)
    compiled = compile_circuit(c, TINY2, embedding=embedding)
    rng = np.random.default_rng(5)
    values = {
        "wa": rng.integers(0, 8, N_CIRCUIT),
        "d": rng.integers(0, 256, N_CIRCUIT),
        "we": rng.integers(0, 2, N_CIRCUIT),
        "ra": rng.integers(0, 8, N_CIRCUIT),
    }
    circuit_rows = compiled.embed(values)
    return compiled, embedding, circuit_rows, values, r, s


def test_mute_report_checks_every_row():
    compiled, embedding, *_ = muted()
    report = compiled.mute
    assert report is not None and report.worst_ratio > 1
    assert len(report.direction.rows) == VOCAB
    assert report.direction.min_margin > 0
    # circuit tokens are exactly zero on the mute dims
    assert set(report.direction.dims.tolist()).isdisjoint(compiled.schedule.used_dims())


@pytest.mark.parametrize("dtype", DTYPES)
def test_text_tokens_bit_identical_and_state_untouched(dtype):
    compiled, embedding, circuit_rows, values, r, s = muted()
    model = CircuitModel(compiled, dtype, text_embedding=embedding, circuit_tokens=circuit_rows)
    rng = np.random.default_rng(9)
    text = rng.integers(0, VOCAB, (2, 40))
    expected = embedding.to(dtype).double().numpy()[text]
    for mode in ("prefill", "decode"):
        residual, cache = model.run(ids=text, mode=mode, return_cache=True)
        as_bits = (
            torch.tensor(residual)
            .to(dtype)
            .view(torch.int16 if dtype is torch.bfloat16 else torch.int32)
        )
        want_bits = torch.tensor(expected).to(dtype).view(as_bits.dtype)
        assert torch.equal(as_bits, want_bits), f"text residual changed ({dtype}, {mode})"
        for state in model.recurrent_states(cache).values():
            assert not np.any(state), "a text token wrote into a recurrent state"

    # Interleaved with circuit tokens: text rows still identical, circuit results unchanged
    # and the final state equals that of the circuit tokens alone.
    order = rng.permutation(N_CIRCUIT)[:24]
    mixed = rng.integers(0, VOCAB, (1, 60))
    slots = np.sort(rng.choice(60, size=24, replace=False))
    mixed[0, slots] = model.circuit_token_base + order
    alone = (model.circuit_token_base + order)[None]
    ref_residual, ref_cache = model.run(ids=alone, mode="prefill", return_cache=True)
    for mode in ("prefill", "decode"):
        residual, cache = model.run(ids=mixed, mode=mode, return_cache=True)
        text_pos = np.setdiff1d(np.arange(60), slots)
        assert np.array_equal(
            residual[0, text_pos], embedding.to(dtype).double().numpy()[mixed[0, text_pos]]
        )
        for f in (r.outputs[0], s):
            assert np.array_equal(
                compiled.decode(residual[0, slots], f), compiled.decode(ref_residual[0], f)
            )
        ref_states = model.recurrent_states(ref_cache)
        for layer, state in model.recurrent_states(cache).items():
            assert np.array_equal(state, ref_states[layer])


def test_isotropic_embedding_cannot_be_muted():
    c, _, _ = build()
    isotropic = synthetic_embedding(VOCAB, TINY2.hidden, seed=1, isotropic=True)
    with pytest.raises(MuteError, match="no muting direction"):
        compile_circuit(c, TINY2, embedding=isotropic)


def test_mute_direction_excludes_unreachable_rows():
    """Rows text can never produce may be left out of the check."""
    c, _, _ = build()
    embedding = synthetic_embedding(VOCAB, TINY2.hidden, seed=11)
    # An outlier pointing exactly against row 8: no half-space holds both. (A lone row
    # pointing the wrong way, -50 * row 7, is still separable: the search finds a way round.)
    embedding[7] = -embedding[8]
    with pytest.raises(MuteError):
        compile_circuit(c, TINY2, embedding=embedding)
    rows = np.setdiff1d(np.arange(VOCAB), [7])
    compiled = compile_circuit(c, TINY2, embedding=embedding, mute_rows=rows)
    assert compiled.mute is not None and compiled.mute.worst_ratio > 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_normalised_rows_are_qwen35_rmsnorm_bit_for_bit(dtype):
    """`normalised_rows` uses RMSNorm's formula; it must equal the HF module's output."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm

    from qwengpu.circuit.mute import normalised_rows

    embedding = synthetic_embedding(700, TINY2.hidden, seed=4, dtype=dtype)
    norm = Qwen3_5RMSNorm(TINY2.hidden, eps=TINY2.rms_norm_eps).to(dtype)
    with torch.no_grad():
        expected = norm(embedding).float().numpy()
    assert np.array_equal(normalised_rows(embedding, TINY2.rms_norm_eps, chunk=256), expected)


def test_separating_direction_is_near_optimal():
    """Points around a known direction: the search finds it, with a small certified gap."""
    from qwengpu.circuit.mute import separating_direction

    rng = np.random.default_rng(2)
    axis = rng.normal(size=40)
    axis /= np.linalg.norm(axis)
    points = rng.normal(size=(5000, 40))
    points -= np.outer(points @ axis, axis)  # then place every point at axis . p >= 1
    points += np.outer(1 + rng.exponential(size=5000), axis)
    found = separating_direction(points.astype(np.float32))
    assert found.margin > 0.95  # `axis` alone achieves 1
    assert found.gap < 0.05 * found.upper  # certified: no direction does much better
    u = found.direction.double().numpy()
    assert float((points @ u).min()) >= found.margin - 1e-4
    assert float(u @ axis) > 0.99
