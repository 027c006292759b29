"""Live-part decode forwards (host.live_decode) on a small random Qwen3.5 whose layers have
zero neurons, heads and a silent attention layer, as the circuit's layers do: the same
logits and states as transformers' modules on every decode pass, float32 rounding apart.
Their bit-for-bit equality on the machine's launches is in tests/machine."""

from __future__ import annotations

import contextlib

import pytest
import torch

from qwengpu.circuit.geometry import TINY
from qwengpu.host.live_decode import (
    LiveDeltaNet,
    LiveLinear,
    LiveLinears,
    LiveMlp,
    LiveParts,
    SilentAttention,
)

LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]


def _model(k_heads: int = 4, seed: int = 0):
    """Layer 0: a third of its neurons dead (zero gate rows, up rows or down columns);
    layer 1: the odd key heads zero; layer 2: every key head zero, MLP zero; layer 3: an
    attention with zero keys, values and output (its queries random, as the circuit's
    q_proj holds its muted output gate). The last layer's MLP stays dense."""
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(seed)
    geometry = TINY.with_layers(linear_key_heads=k_heads)
    model = Qwen3_5ForCausalLM(geometry.text_config(LAYERS, vocab_size=64)).eval()
    layers = model.model.layers
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.05)
        mlp = layers[0].mlp
        mlp.gate_proj.weight[0:100] = 0
        mlp.up_proj.weight[100:200] = 0
        mlp.down_proj.weight[:, 200:300] = 0
        odd_heads, every_head = slice(1, None, 2), slice(None)
        for attn, dead in ((layers[1].linear_attn, odd_heads), (layers[2].linear_attn, every_head)):
            keys = attn.in_proj_qkv.weight[attn.key_dim : 2 * attn.key_dim]
            keys.view(attn.num_k_heads, attn.head_k_dim, -1)[dead] = 0
        for p in layers[2].mlp.parameters():
            p.zero_()
        attn = layers[3].self_attn
        for proj in (attn.k_proj, attn.v_proj, attn.o_proj):  # q stays: as the circuit's
            proj.weight.zero_()
    return model


def _decode(model, live: LiveParts | None, steps: int = 6):
    """Prefill 5 tokens of 3 sequences, then `steps` greedy decode passes, all with the
    live parts installed (`live`) or not; every pass's logits and the final DeltaNet
    states."""
    from transformers import DynamicCache

    ids = torch.tensor([[3, 9, 27, 17, 5], [1, 2, 3, 4, 5], [60, 7, 7, 7, 40]])
    cache = DynamicCache(config=model.config)
    logits = []
    with torch.no_grad(), live.installed() if live else contextlib.nullcontext():
        out = model(input_ids=ids, cache=cache, use_cache=True)  # the live prefill
        logits.append(out.logits[:, -1])
        for _ in range(steps):
            step = out.logits[:, -1:].argmax(-1)
            if live is None:
                out = model(input_ids=step, cache=cache, use_cache=True)
            else:
                with live.installed():
                    out = model(input_ids=step, cache=cache, use_cache=True)
            logits.append(out.logits[:, -1])
    states = [cache.get_recurrent_state(i) for i in range(3)]
    return torch.stack(logits), states, cache


@pytest.mark.parametrize("k_heads", [4, 2], ids=["one key head per value head", "grouped"])
def test_same_logits_and_states_as_the_modules(k_heads):
    model = _model(k_heads)
    live = LiveParts.of(model)
    want, want_states, want_cache = _decode(model, None)
    got, got_states, got_cache = _decode(model, live)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    for got_state, want_state in zip(got_states[:2], want_states[:2], strict=True):
        assert torch.allclose(got_state, want_state, atol=1e-5, rtol=1e-5)
    # no live head: nothing ever written, and no state or windows kept for it
    assert torch.count_nonzero(want_states[2]) == 0 and got_states[2] is None
    assert got_cache.get_conv_state(2) is None
    assert got_cache.get_seq_length() == want_cache.get_seq_length() == 5 + 6
    silent, reference = got_cache.layers[3], want_cache.layers[3]
    assert torch.equal(silent.keys, reference.keys) and torch.equal(silent.values, reference.values)
    assert silent.keys.stride(2) == 0  # one broadcast zero row: no copy of the cache per token


def test_live_parts_are_what_the_weights_leave():
    model = _model()
    layers = model.model.layers
    live = LiveParts.of(model)
    mlp = LiveMlp.of(layers[0].mlp)
    assert mlp.neurons == TINY.intermediate - 300
    assert LiveMlp.of(layers[2].mlp).neurons == 0
    assert LiveMlp.of(layers[3].mlp) is None  # dense: the module's own forward
    heads = LiveDeltaNet.of(layers[1].linear_attn).heads.tolist()
    assert heads == [0, 2]
    assert LiveDeltaNet.of(layers[2].linear_attn).heads.tolist() == []
    assert LiveDeltaNet.of(layers[0].linear_attn) is None
    assert SilentAttention.of(layers[3].self_attn) is not None
    with torch.no_grad():
        layers[3].self_attn.v_proj.weight[0, 0] = 1.0
    assert SilentAttention.of(layers[3].self_attn) is None  # one value weight: it speaks
    assert set(live.forwards) == {
        layers[0].mlp, layers[1].linear_attn, layers[2].mlp, layers[2].linear_attn,
        layers[3].self_attn,
    }  # fmt: skip


def test_installed_only_inside_the_block():
    model = _model()
    live = LiveParts.of(model)
    module = model.model.layers[1].linear_attn
    with pytest.raises(RuntimeError), live.installed():
        assert module.forward == live.forwards[module]
        raise RuntimeError("a failed launch")
    assert "forward" not in module.__dict__  # the class's forward again


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sparse_projection_sums_the_dense_products_terms(dtype):
    """A weight with a few nonzeros per row (a circuit gate) runs as a float32 CSR product
    rounded once to the input's dtype: on small integers, the dense product to the bit;
    a dense weight stays a dense product."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.zeros(40, 256)
    for row in range(40):
        columns = torch.randperm(256, generator=gen)[:3]
        weight[row, columns] = torch.randint(-4, 5, (3,), generator=gen).float()
    x = torch.randint(-8, 9, (2, 3, 256), generator=gen).to(dtype)
    sparse = LiveLinear(weight.to(dtype))
    assert sparse.sparse and sparse.weight.layout == torch.sparse_csr
    got = sparse(x)
    assert got.dtype == dtype and got.shape == (2, 3, 40)
    assert torch.equal(got, torch.nn.functional.linear(x, weight.to(dtype)))
    dense = LiveLinear(torch.randn(40, 256, generator=gen).to(dtype))
    assert not dense.sparse
    assert not LiveLinear(torch.zeros(0, 256)).sparse  # no rows: nothing to run
    # projections of one input: the sparse ones stacked into one product, each output
    # to the bit of its own product; a dense one on its own
    top, bottom, dense_w = weight[:15].to(dtype), weight[15:].to(dtype), dense.weight
    parts = LiveLinears(top, dense_w, bottom)
    assert parts.sparse == [0, 2] and list(parts.dense) == [1]
    got = parts(x)
    assert len(got) == 3
    for out, w in zip(got, (top, dense_w, bottom), strict=True):
        assert torch.equal(out, LiveLinear(w)(x))


def test_a_layer_with_every_head_live_but_sparse_projections_runs_live():
    """The circuit's memory layers use every head with a few weights each: live, for the
    sparse projections and rows; a dense layer with every head live is left alone."""
    model = _model()
    attn = model.model.layers[0].linear_attn
    assert LiveDeltaNet.of(attn) is None
    with torch.no_grad():
        qkv = attn.in_proj_qkv.weight
        qkv.mul_(torch.rand_like(qkv) < 0.01)
    live = LiveDeltaNet.of(attn)
    assert live is not None and live.heads.tolist() == list(range(attn.num_v_heads))
    assert live.inputs.sparse == [0]  # the qkv rows
