"""Batch surgery on transformers' DynamicCache for ModelBackend.launch_many: prefill
groups of similar prompt lengths on their own and join their caches into one batch, and
drop the rows of ended launches without copying the rows that stay.

A Qwen3.5 DynamicCache holds, per layer, either a LinearAttentionLayer (a DeltaNet's conv
windows and recurrent state, batch first, one entry per token position summarised) or a
DynamicLayer (an attention layer's keys and values, (batch, heads, positions, dim)). The
circuit's silent attention layers hold their zero keys as one row broadcast along the
positions (stride 0: host.live_decode.SilentAttention); both functions keep it so.
`with_room_to_grow` gives the other attention layers (the base's) keys and values that
a decode pass extends in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer


def _stored(t: torch.Tensor) -> torch.Tensor:
    """The part of `t` that memory holds: every broadcast dim (stride 0) cut to one."""
    return t[tuple(slice(0, 1) if n == 0 else slice(None) for n in t.stride())]


def _broadcast(t: torch.Tensor) -> bool:
    return 0 in t.stride()


ROOM_MIN = 256
"""Positions a GrowingLayer's buffers hold past its cached ones at least; each regrowth
doubles the positions, so a launch of n tokens copies its cache O(log n) times."""


class GrowingLayer(DynamicLayer):
    """An attention layer's cache whose keys and values are the first positions of buffers
    with room to spare: a decode pass writes its position in place, where DynamicLayer's
    torch.cat copies every cached position of every row (at 64 rows and 1,000 positions,
    about 128 MB a pass on the 0.8B base). The keys and values are views of the buffers
    (attention reads them as they are: the same result as from a contiguous copy), and
    drop_rows cuts them like any layer's; a view no longer of the buffers is copied into
    new ones."""

    def __init__(self, layer: DynamicLayer) -> None:
        super().__init__()
        self.is_initialized, self.device = True, layer.keys.device
        self._buffers = (layer.keys, layer.values)  # replaced on the first update
        self.keys, self.values = layer.keys, layer.values

    def _views_of_buffers(self, positions: int) -> bool:
        """Whether keys and values are still the buffers' first rows and positions, with
        room for `positions` more."""
        return all(
            t.data_ptr() == b.data_ptr()
            and t.stride() == b.stride()
            and t.shape[-2] + positions <= b.shape[-2]
            for t, b in zip((self.keys, self.values), self._buffers, strict=True)
        )

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cached, new = self.keys.shape[-2], key_states.shape[-2]
        if not self._views_of_buffers(new):
            room = max(cached + new, ROOM_MIN)
            self._buffers = tuple(
                torch.nn.functional.pad(t, (0, 0, 0, new + room)) for t in (self.keys, self.values)
            )
        rows, end = key_states.shape[0], cached + new
        for buffer, t in zip(self._buffers, (key_states, value_states), strict=True):
            buffer[:rows, :, cached:end] = t
        self.keys, self.values = (b[:rows, :, :end] for b in self._buffers)
        return self.keys, self.values


def with_room_to_grow(cache: Any) -> None:
    """Make each attention layer of the cache that stores its keys (not a broadcast row) a
    GrowingLayer, in place."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and not _broadcast(layer.keys):
            cache.layers[i] = GrowingLayer(layer)


KNOWN_LAYERS = (DynamicLayer, GrowingLayer, LinearAttentionLayer)


def drop_rows(cache: Any, ended: Sequence[int], batch: int) -> list[int]:
    """Remove the rows `ended` from a batch of `batch` rows in the cache, in place: each
    ended row below the new batch size takes one of the last rows that stays (a copy), then
    every tensor is cut to the new size. Returns the old row of each new row. It copies one
    row per ended row, where transformers' reorder_cache copies every row that stays (the
    circuit's DeltaNet states are about 8 MB a row on the 0.8B machine); a cache layer of
    another kind falls back to reorder_cache."""
    gone = set(ended)
    keep = batch - len(gone)
    holes = sorted(gone.intersection(range(keep)))
    movers = [r for r in range(keep, batch) if r not in gone]
    order = list(range(keep))
    for hole, mover in zip(holes, movers, strict=True):
        order[hole] = mover
    if any(type(layer) not in KNOWN_LAYERS for layer in cache.layers):
        cache.reorder_cache(torch.tensor(order, device=cache.layers[0].device))
        return order

    def dropped(t: torch.Tensor) -> torch.Tensor:
        if holes:  # a broadcast dim (one stored value) is written once
            stored = _stored(t)
            rows = stored.index_select(0, torch.tensor(movers, device=t.device))
            stored.index_copy_(0, torch.tensor(holes, device=t.device), rows)
        return t[:keep]

    for layer in cache.layers:
        if isinstance(layer, LinearAttentionLayer):
            for states in (layer.conv_states, layer.recurrent_states):
                for slot, t in states.items():
                    if t is not None:
                        states[slot] = dropped(t)
        elif layer.is_initialized and layer.keys.numel():
            layer.keys, layer.values = dropped(layer.keys), dropped(layer.values)
    return order


def join_left_padded(caches: Sequence[Any]) -> Any:
    """The caches of prefills of different widths as one batch (their rows in order), in
    the first cache: DeltaNet windows and states stacked, attention keys and values
    left-padded with zeros to the widest prefill's positions (a padding mask hides them,
    as it hides each prefill's own left padding). Each layer's parts are freed as it is
    joined, so the join holds one layer twice at most. Raises ValueError on a cache layer
    of another kind."""
    first = caches[0]
    if any(type(layer) not in KNOWN_LAYERS for c in caches for layer in c.layers):
        raise ValueError("only DynamicLayer and LinearAttentionLayer caches can be joined")
    for i, layer in enumerate(first.layers):
        parts = [c.layers[i] for c in caches]
        if isinstance(layer, LinearAttentionLayer):
            for name in ("conv_states", "recurrent_states"):
                for slot, t in getattr(layer, name).items():
                    if t is not None:
                        joined = torch.cat([getattr(p, name)[slot] for p in parts])
                        for p in parts:
                            getattr(p, name)[slot] = None
                        getattr(layer, name)[slot] = joined
        elif layer.is_initialized:
            width = max(p.keys.shape[-2] for p in parts)
            layer.keys, layer.values = (
                _left_padded([getattr(p, name) for p in parts], width)
                for name in ("keys", "values")
            )
    return first


def _left_padded(parts: list[torch.Tensor], width: int) -> torch.Tensor:
    """(batch, heads, positions, dim) tensors joined along the batch, each left-padded with
    zero positions to `width`; broadcast ones stay one broadcast row."""
    if all(_broadcast(t) for t in parts):
        rows = torch.cat([_stored(t) for t in parts])
        return rows.expand(-1, -1, width, -1)
    return torch.cat([torch.nn.functional.pad(t, (0, 0, width - t.shape[-2], 0)) for t in parts])
