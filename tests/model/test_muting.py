"""Muting: the separating direction, and the proof that a circuit's gates are silent on text."""

from __future__ import annotations

import pytest
import torch

from qwengpu.errors import ModelError
from qwengpu.model.muting import (
    MUTE_THRESHOLD,
    MutingVerifier,
    find_mute_direction,
)
from qwengpu.model.passthrough import _layer_weights


@pytest.fixture(scope="module")
def text_rows(tiny_base):
    """The tiny base's embedding rows for every token its tokenizer can produce."""
    ids = tiny_base.text_token_ids()
    return tiny_base.load(tiny_base.embedding_key)[: len(ids)]


@pytest.fixture(scope="module")
def direction(text_rows):
    return find_mute_direction(text_rows, channels=range(4, 64), storage_dtype=torch.bfloat16)


def test_silu_and_sigmoid_are_exactly_zero_past_the_threshold():
    """What muting relies on, measured on this platform's kernels."""
    x = -torch.logspace(torch.log10(torch.tensor(MUTE_THRESHOLD)), 7, 5000, dtype=torch.float64)
    for dtype in (torch.bfloat16, torch.float32):
        values = x.to(dtype)
        assert bool((torch.sigmoid(values) == 0).all())
        assert bool((torch.nn.functional.silu(values) == 0).all())
        assert bool((torch.nn.functional.silu(values.float()) == 0).all())  # gated norm path
        assert bool((torch.nn.functional.softplus(values.float()) == 0).all())


def test_realistic_embeddings_have_a_muting_direction(direction, text_rows):
    w = direction.vector
    assert direction.margin > 1.0  # a common mean + anisotropic spectrum separates well
    assert direction.gap < 0.1 * direction.margin
    assert bool((w[:4] == 0).all()), "zero off the chosen channels"
    assert torch.equal(w.to(torch.bfloat16).float(), w), "exact in the storage dtype"
    assert abs(float(w.norm()) - 1) < 1e-2
    # every text row really sits below: w . x_hat <= -margin
    x = text_rows.float()
    x_hat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    worst = float((x_hat.double() @ w.double()).max()) / float(w.double().norm())
    assert worst <= -direction.margin + 1e-9


def test_isotropic_embeddings_have_none():
    """Zero-mean isotropic rows in more points than dimensions surround the origin."""
    rows = torch.randn(20000, 32, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ModelError, match="no muting direction"):
        find_mute_direction(rows)


def _config(base):
    return dict(base.text_config)


def test_passthrough_layers_are_proven_muted(tiny_base, text_rows, direction):
    config = _config(tiny_base)
    verifier = MutingVerifier(text_rows, direction.vector, config)
    gen = torch.Generator().manual_seed(0)
    for index, kind in enumerate(("linear_attention", "full_attention")):
        weights = _layer_weights(kind, config, direction.gate_row(), True, gen)
        verifier.check_layer(index, kind, weights)
    report = verifier.report
    assert report.ok and report.checks
    assert all(c.worst_bound <= -MUTE_THRESHOLD for c in report.checks)
    assert {c.dtype for c in report.checks} == {"bfloat16", "float32"}
    assert report.decaying_heads == []
    summary = report.summary()
    assert summary["worst_gate_bound"] < -1000 and summary["rows_checked_exactly"] == 0


def test_an_unmuted_gate_is_refused(tiny_base, text_rows, direction):
    config = _config(tiny_base)
    weights = _layer_weights("linear_attention", config, direction.gate_row(), False, None)
    weights["mlp.gate_proj.weight"][5] = 0.01 * torch.randn(64)  # one gate row not muted
    verifier = MutingVerifier(text_rows, direction.vector, config)
    with pytest.raises(ModelError, match=r"layer 3 .*mlp.gate_proj is not muted.*rows \[5\]"):
        verifier.check_layer(3, "linear_attention", weights)


def test_a_scale_too_small_is_refused(tiny_base, text_rows, direction):
    """m * margin must pass the threshold: m = 1 leaves gates around -2.6."""
    config = _config(tiny_base)
    weights = _layer_weights("full_attention", config, direction.gate_row(1.0), False, None)
    verifier = MutingVerifier(text_rows, direction.vector, config)
    with pytest.raises(ModelError, match="not muted"):
        verifier.check_layer(0, "full_attention", weights)


def test_rows_the_bound_cannot_settle_are_checked_exactly(tiny_base, text_rows, direction):
    """A gate row with a large component off w: Cauchy-Schwarz is too loose, the exact
    evaluation over every text row still proves it (or refutes it)."""
    config = _config(tiny_base)
    weights = _layer_weights("linear_attention", config, direction.gate_row(), False, None)
    perp = torch.randn(64, generator=torch.Generator().manual_seed(1))
    perp -= (perp @ direction.vector) / direction.vector.dot(direction.vector) * direction.vector
    perp = perp / perp.norm() * 2.0**14 * direction.margin / 8 * 1.5  # bound > 0 here
    gate = weights["linear_attn.in_proj_b.weight"]
    gate[0] = (gate[0] + perp).to(torch.bfloat16).float()
    verifier = MutingVerifier(text_rows, direction.vector, config)
    verifier.check_layer(0, "linear_attention", weights)
    checks = [c for c in verifier.report.checks if c.gate == "linear_attn.in_proj_b"]
    assert all(c.exact_rows == 1 and not c.failed_rows for c in checks)
    assert all(c.worst_bound <= -MUTE_THRESHOLD for c in checks)


def test_text_decaying_circuit_state_is_reported(tiny_base, text_rows, direction):
    config = _config(tiny_base)
    weights = _layer_weights("linear_attention", config, direction.gate_row(), False, None)
    weights["linear_attn.A_log"][1] = 0.0  # exp(0) = 1: text tokens decay head 1's state
    verifier = MutingVerifier(text_rows, direction.vector, config)
    verifier.check_layer(2, "linear_attention", weights)
    assert verifier.report.decaying_heads == [(2, 1)]
