"""The CPU decode kernel against transformers' torch kernel on random data (float32
rounding apart, the same recurrence) and its installation in the layers' module. Its
bit-for-bit equality on the machine's own states is in tests/machine/test_model_launch.py."""

from __future__ import annotations

import types

import pytest
import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen3_5

from qwengpu.host import decode_kernel
from qwengpu.host.decode_kernel import (
    SPARSE_ROWS_MAX,
    recurrent_gated_delta_rule,
    sparse_rows_delta_rule,
)

REFERENCE = qwen3_5.torch_recurrent_gated_delta_rule


def _inputs(batch=3, steps=1, k_heads=4, v_heads=4, dim=16, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    q, k = rand(batch, steps, k_heads, dim), rand(batch, steps, k_heads, dim)
    v = rand(batch, steps, v_heads, dim)
    g = -torch.rand(batch, steps, v_heads, generator=gen)
    beta = torch.rand(batch, steps, v_heads, generator=gen).to(dtype)
    state = torch.randn(batch, v_heads, dim, dim, generator=gen)
    return q, k, v, g, beta, state


@pytest.mark.parametrize(
    ("steps", "k_heads", "dtype"),
    [(1, 4, torch.float32), (3, 4, torch.float32), (2, 2, torch.float32), (1, 4, torch.bfloat16)],
)
def test_same_recurrence_as_transformers(steps, k_heads, dtype):
    q, k, v, g, beta, state = _inputs(steps=steps, k_heads=k_heads, dtype=dtype)
    want_out, want_state = REFERENCE(q, k, v, g, beta, state.clone(), True, True)
    got_out, got_state = recurrent_gated_delta_rule(q, k, v, g, beta, state.clone(), True, True)
    assert got_out.dtype == want_out.dtype and got_out.shape == want_out.shape
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.allclose(got_out.float(), want_out.float(), atol=tol, rtol=tol)
    assert got_state.dtype == torch.float32
    assert torch.allclose(got_state, want_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("held", ["every head", "all but one head"])
def test_heads_that_keep_their_state(held):
    """g = 0 (a circuit layer's memory heads: decay exactly 1) skips the decay; one head that
    still decays must not be skipped."""
    q, k, v, g, beta, state = _inputs(steps=2)
    g = torch.zeros_like(g)
    if held == "all but one head":
        g[1, :, 2] = -0.5
    want_out, want_state = REFERENCE(q, k, v, g, beta, state.clone(), True, True)
    got_out, got_state = recurrent_gated_delta_rule(q, k, v, g, beta, state.clone(), True, True)
    assert torch.allclose(got_out, want_out, atol=1e-5, rtol=1e-5)
    assert torch.allclose(got_state, want_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("writing", [[], [0, 5], list(range(12))])
def test_heads_with_beta_zero_write_nothing(writing):
    """Only the heads whose beta is not 0 are updated (the circuit's memories written on a
    token); the others keep their state bit for bit, and every head is read."""
    q, k, v, g, beta, state = _inputs(steps=2)
    g = torch.zeros_like(g)
    beta = torch.zeros_like(beta)
    heads = beta.shape[-1]
    for flat in writing:
        beta[flat // heads, :, flat % heads] = 0.5 + flat / 32
    want_out, want_state = REFERENCE(q, k, v, g, beta, state.clone(), True, True)
    got_out, got_state = recurrent_gated_delta_rule(q, k, v, g, beta, state.clone(), True, True)
    assert torch.allclose(got_out, want_out, atol=1e-5, rtol=1e-5)
    assert torch.allclose(got_state, want_state, atol=1e-5, rtol=1e-5)
    kept = beta[:, 0] == 0
    assert torch.equal(got_state[kept], state[kept])


def test_no_initial_state_and_no_final_state():
    q, k, v, g, beta, _ = _inputs(steps=2)
    want_out, _ = REFERENCE(q, k, v, g, beta, None, False, False)
    got_out, got_state = recurrent_gated_delta_rule(q, k, v, g, beta, None, False, False)
    assert got_state is None
    assert torch.allclose(got_out, want_out, atol=1e-5, rtol=1e-5)


def test_state_updated_in_place_unless_it_must_be_converted():
    q, k, v, g, beta, state = _inputs()
    _, returned = recurrent_gated_delta_rule(q, k, v, g, beta, state, True, True)
    assert returned is state  # float32 and contiguous: the cache's own tensor
    transposed = state.clone().transpose(-1, -2)  # not contiguous: a copy, input untouched
    before = transposed.clone()
    _, returned = recurrent_gated_delta_rule(q, k, v, g, beta, transposed, True, True)
    assert returned is not transposed and torch.equal(transposed, before)


def _memory_token(batch=3, k_heads=4, v_heads=4, dim=16, seed=0, dtype=torch.float32):
    """A token as the circuit's memories see it: one-hot keys (pre-activation 30, as the
    circuit's), queries on a row plus the never-written last row, beta exactly 0 or 1,
    no decay, and a state of small integers whose last row is 0."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, dim - 1, (batch, 1, k_heads), generator=gen)
    k = torch.nn.functional.one_hot(rows, dim).to(dtype) * 30
    q = torch.nn.functional.one_hot(torch.randint(0, dim - 1, rows.shape, generator=gen), dim)
    q = (q + torch.nn.functional.one_hot(torch.full_like(rows, dim - 1), dim)).to(dtype) * 30
    v = torch.randint(0, 9, (batch, 1, v_heads, dim), generator=gen).to(dtype)
    beta = torch.randint(0, 2, (batch, 1, v_heads), generator=gen).to(dtype)
    state = torch.randint(0, 5, (batch, v_heads, dim, dim), generator=gen).float()
    state[:, :, -1] = 0
    return q, k, v, torch.zeros(batch, 1, v_heads), beta, state


@pytest.mark.parametrize(
    ("k_heads", "dtype"), [(4, torch.float32), (2, torch.float32), (4, torch.bfloat16)]
)
def test_sparse_rows_give_the_reference_bit_for_bit_on_memories(k_heads, dtype):
    q, k, v, g, beta, state = _memory_token(k_heads=k_heads, dtype=dtype)
    want_out, want_state = REFERENCE(q, k, v, g, beta, state.clone(), True, True)
    heads = torch.arange(4)
    got_state = state.clone()
    got_out = sparse_rows_delta_rule(got_state, heads, q, k, v, beta)
    assert got_out.dtype == want_out.dtype and torch.equal(got_out, want_out)
    assert torch.equal(got_state, want_state)


def test_sparse_rows_update_only_the_given_heads_in_place():
    """The heads of a wider state (a circuit layer's live heads): theirs as the reference
    computes them alone, every other head untouched."""
    q, k, v, g, beta, state = _memory_token(k_heads=2, v_heads=2)
    wide = torch.randn(3, 6, 16, 16)
    heads = torch.tensor([1, 4])
    wide[:, heads] = state
    before = wide.clone()
    want_out, want_state = REFERENCE(q, k, v, g, beta, state.clone(), True, True)
    got_out = sparse_rows_delta_rule(wide, heads, q, k, v, beta)
    assert torch.equal(got_out, want_out)
    assert torch.equal(wide[:, heads], want_state)
    others = [0, 2, 3, 5]
    assert torch.equal(wide[:, others], before[:, others])


def test_dense_keys_are_left_to_the_dense_kernel():
    q, k, v, _, beta, state = _inputs()  # random keys: every entry nonzero
    assert k.shape[-1] > SPARSE_ROWS_MAX
    before = state.clone()
    assert sparse_rows_delta_rule(state, torch.arange(4), q, k, v, beta) is None
    assert torch.equal(state, before)


def _model(model_type: str, device: str):
    return types.SimpleNamespace(
        config=types.SimpleNamespace(model_type=model_type), device=torch.device(device)
    )


def test_installed_for_a_qwen3_5_model_on_the_cpu_and_restored():
    with decode_kernel.installed(_model("qwen3_5_text", "cpu")) as done:
        assert done
        assert qwen3_5.torch_recurrent_gated_delta_rule is recurrent_gated_delta_rule
    assert qwen3_5.torch_recurrent_gated_delta_rule is REFERENCE
    with pytest.raises(RuntimeError), decode_kernel.installed(_model("qwen3_5", "cpu")):
        raise RuntimeError("a failed launch")
    assert qwen3_5.torch_recurrent_gated_delta_rule is REFERENCE


@pytest.mark.parametrize(("model_type", "device"), [("qwen3_5_text", "meta"), ("llama", "cpu")])
def test_not_installed_elsewhere(model_type, device):
    with decode_kernel.installed(_model(model_type, device)) as done:
        assert not done
        assert qwen3_5.torch_recurrent_gated_delta_rule is REFERENCE
