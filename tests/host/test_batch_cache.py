"""Batch surgery on transformers' cache (host.batch_cache): dropping ended rows in place,
joining prefills of different widths into one left-padded batch, and attention caches
extended in place, checked against transformers' own reorder, one padded prefill and
DynamicLayer's concatenation on a small random Qwen3.5."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from qwengpu.circuit.geometry import TINY
from qwengpu.host.batch_cache import (
    ROOM_MIN,
    GrowingLayer,
    drop_rows,
    join_left_padded,
    with_room_to_grow,
)

LAYERS = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]


def _tensors(layer) -> list:
    if hasattr(layer, "conv_states"):
        return [*layer.conv_states.values(), *layer.recurrent_states.values()]
    return [layer.keys, layer.values]


@pytest.mark.parametrize("ended", [[1, 4], [5], [0, 1, 2], [2, 3, 4, 5]])
def test_dropping_ended_rows_keeps_every_other_rows_cache(ended):
    """drop_rows moves the last rows into the ended ones' places and cuts the batch: each
    remaining row's states, windows, keys and values (a broadcast zero row included, as the
    circuit's silent attention holds them) are those of the row it says it came from."""
    config = TINY.text_config(LAYERS * 2, vocab_size=64)
    cache = DynamicCache(config=config)
    batch, gen = 6, torch.Generator().manual_seed(0)
    for i, layer in enumerate(cache.layers):
        if config.layer_types[i] == "linear_attention":
            cache.update_conv_state(torch.randn(batch, 48, 4, generator=gen), i)
            cache.update_recurrent_state(torch.randn(batch, 2, 8, 8, generator=gen), i)
        elif i == 3:  # a base attention layer: real keys and values
            kv = torch.randn(2, batch, 1, 5, 16, generator=gen)
            cache.update(kv[0], kv[1], i)
        else:  # a silent one: zeros, one row broadcast along the positions
            zero = torch.zeros(batch, 1, 1, 16)
            cache.update(zero, zero, i)
            layer.keys = layer.values = zero.expand(-1, -1, 5, -1)
    before = [[t.clone() for t in _tensors(layer)] for layer in cache.layers]
    order = drop_rows(cache, ended, batch)
    assert sorted(order) == [r for r in range(batch) if r not in ended]
    for layer, was in zip(cache.layers, before, strict=True):
        for t, old in zip(_tensors(layer), was, strict=True):
            assert torch.equal(t, old[order])
    if order:  # the cut states stay viewable flat (sparse_rows_delta_rule's row access)
        cache.layers[0].recurrent_states[0].view(-1, 8)


def _model():
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(TINY.text_config(LAYERS, vocab_size=64)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.05)
    return model


def _decode(model, cache, mask, logits, passes=3):
    """Greedy passes with the padding mask growing by one real token each; the logits."""
    out = [logits]
    for _ in range(passes):
        mask = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
        ids = out[-1].argmax(-1)[:, None]
        step = model(input_ids=ids, cache=cache, use_cache=True, attention_mask=mask)
        out.append(step.logits[:, -1])
    return torch.stack(out)


def _padded(prompts, width):
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def test_joined_prefills_decode_as_one_padded_prefill():
    """Prompts of 7, 5 and 3 tokens: prefilled as groups [7] and [5, 3] and joined, they
    decode as the three prefilled together (padded to 7, masked): the same logits and
    DeltaNet states, float32 rounding apart (the products batch differently), and the same
    keys and values wherever the mask lets them be read."""
    model = _model()
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (n,), generator=gen).tolist() for n in (7, 5, 3)]
    with torch.no_grad():
        ids, mask = _padded(prompts, 7)
        whole = DynamicCache(config=model.config)
        out = model(input_ids=ids, attention_mask=mask, cache=whole, use_cache=True)
        want = _decode(model, whole, mask, out.logits[:, -1])
        parts, logits = [], []
        for group, width in (([0], 7), ([1, 2], 5)):
            ids, part_mask = _padded([prompts[b] for b in group], width)
            cache = DynamicCache(config=model.config)
            positions = torch.arange(7 - width, 7).expand(len(group), -1)  # as in the batch
            out = model(
                input_ids=ids,
                attention_mask=part_mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
            )
            parts.append(cache)
            logits.append(out.logits[:, -1])
        joined = join_left_padded(parts)
        assert joined is parts[0] and joined.get_seq_length() == 7
        got = _decode(model, joined, mask, torch.cat(logits))
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    real = torch.cat([mask, mask.new_ones(3, 3)], dim=1).bool()  # not the padding
    for a, b in zip(joined.layers, whole.layers, strict=True):
        for x, y in zip(_tensors(a), _tensors(b), strict=True):
            if x.dim() == 4 and x.shape[2] == real.shape[1]:  # keys, values: masked out
                x, y = x.transpose(1, 2)[real], y.transpose(1, 2)[real]
            assert x.shape == y.shape and torch.allclose(x, y, atol=1e-5)


def test_joining_keeps_a_broadcast_row_broadcast():
    """A silent attention layer's zero keys (one row broadcast along the positions) join
    as one broadcast row of the widest width; real keys are left-padded with zeros."""
    config = TINY.text_config(LAYERS, vocab_size=64)
    caches = []
    for batch, width in ((2, 6), (3, 4)):
        cache = DynamicCache(config=config)
        zero = torch.zeros(batch, 1, 1, 16)
        cache.update(zero, zero, 3)
        cache.layers[3].keys = cache.layers[3].values = zero.expand(-1, -1, width, -1)
        caches.append(cache)
    joined = join_left_padded(caches).layers[3]
    assert joined.keys.shape == (5, 1, 6, 16) and joined.keys.stride(2) == 0
    real = [torch.ones(1, 1, n, 2) for n in (3, 1)]
    for cache, keys in zip(caches, real, strict=True):
        cache.layers[3].keys = cache.layers[3].values = keys
    joined = join_left_padded(caches).layers[3]
    assert joined.keys[:, 0, :, 0].tolist() == [[1, 1, 1], [0, 0, 1]]


def test_a_growing_layer_holds_what_concatenation_would():
    """Keys and values extended in place (GrowingLayer) equal DynamicLayer's concatenated
    ones through a regrowth and a drop of rows, and a pass within the room copies nothing
    (the buffers stay where they were)."""
    from transformers.cache_utils import DynamicLayer

    gen = torch.Generator().manual_seed(2)
    reference, layer = DynamicLayer(), DynamicLayer()
    prefill = torch.randn(2, 4, 3, 2, 8, generator=gen)  # (k/v, rows, heads, positions, dim)
    for cache in (reference, layer):
        cache.update(prefill[0], prefill[1])
    layer = GrowingLayer(layer)
    rows, passes = 4, ROOM_MIN + 10  # past the first buffers' room
    buffers = []
    for n in range(passes):
        if n == 5:  # rows 1 and 3 end: drop_rows's move and cut, and the reference's
            cache = DynamicCache(config=TINY.text_config(LAYERS, vocab_size=64))
            cache.layers = [layer]
            order = drop_rows(cache, [1, 3], rows)
            reference.batch_select_indices(torch.tensor(order))
            rows = 2
        kv = torch.randn(2, rows, 3, 1, 8, generator=gen)
        want = reference.update(kv[0], kv[1])
        got = layer.update(kv[0], kv[1])
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True)), n
        assert layer.get_seq_length() == reference.get_seq_length() == 2 + n + 1
        buffers.append(layer.keys.data_ptr())
    assert len(set(buffers)) == 2  # grown once, after the first buffers' room ran out


def test_only_stored_attention_keys_get_room_to_grow():
    """with_room_to_grow turns the layers with real keys into GrowingLayers; DeltaNet layers
    and broadcast (silent) attention layers stay as they are."""
    config = TINY.text_config(LAYERS * 2, vocab_size=64)
    cache = DynamicCache(config=config)
    keys = torch.randn(2, 1, 3, 16)
    cache.update(keys, keys, 3)  # a base attention layer
    zero = torch.zeros(2, 1, 1, 16)
    cache.update(zero, zero, 7)
    cache.layers[7].keys = cache.layers[7].values = zero.expand(-1, -1, 3, -1)
    kinds = [type(layer) for layer in cache.layers]
    with_room_to_grow(cache)
    assert type(cache.layers[3]) is GrowingLayer and torch.equal(cache.layers[3].keys, keys)
    assert [type(layer) for i, layer in enumerate(cache.layers) if i != 3] == kinds[:3] + kinds[4:]
