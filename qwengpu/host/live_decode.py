"""Forward passes over the live part of each layer: the circuit's zero weights skipped.

A circuit layer fills a fraction of its decoder layer (`qgpu inspect`): some MLP neurons,
some DeltaNet heads, and its full-attention layers are all zero. Qwen3.5's modules
compute every neuron and head regardless. `LiveParts.of(model)` finds, from the weights
alone, what in each layer can change its output or its state, and `installed` gives those
modules, for the length of a `with` block, forwards over that part only:

- MLP (every pass): neuron n adds silu(g_n . x) (u_n . x) d_n, exactly 0 when its gate
  row, up row or down column is all zero, so only the others are computed.
- DeltaNet (one-token decode passes with the cache; prefill runs transformers' chunked
  path unchanged): a head whose key rows are all zero never writes its state (the delta
  rule writes k delta^T) and reads 0 from it (the state starts at 0), so its output is 0;
  only the other heads are projected, convolved, updated and read.
- Full attention with all-zero k, v and o projections (every pass): the output is 0
  whatever the queries (the circuit's q_proj holds only its muted output gate); the
  layer's cache still grows by one zero key and value per token, as transformers' would
  (the cache's length gives the positions), held as one broadcast zero row, not copied.

The skipped terms are exact zeros, so each output is the same sum without them; the sums
of the live terms may run in another order than the full matrix products'. On the
machine's launches every token and every DeltaNet state comes out as transformers' to
the bit (tests/machine/test_model_launch.py). Layers without skippable parts (the base
model's) keep their modules' forwards. ModelBackend.launch_many installs them on the CPU,
with the decode kernel (host.decode_kernel).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5
from transformers.cache_utils import DynamicLayer


def _nonzero_rows(weight: torch.Tensor) -> torch.Tensor:
    return weight.ne(0).any(dim=1)


@dataclass
class LiveMlp:
    """The neurons of a SwiGLU MLP whose gate, up and down weights are all nonzero."""

    gate: torch.Tensor
    up: torch.Tensor
    down: torch.Tensor
    act: Any
    hidden: int

    @classmethod
    def of(cls, mlp: Any) -> LiveMlp | None:
        gate, up, down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
        live = _nonzero_rows(gate) & _nonzero_rows(up) & _nonzero_rows(down.t())
        if bool(live.all()):
            return None  # nothing to skip: the module's own forward
        rows = live.nonzero().squeeze(1)
        return cls(gate[rows], up[rows], down[:, rows].contiguous(), mlp.act_fn, down.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate.shape[0] == 0:
            return x.new_zeros(*x.shape[:-1], self.hidden)
        return F.linear(self.act(F.linear(x, self.gate)) * F.linear(x, self.up), self.down)


@dataclass
class LiveDeltaNet:
    """The DeltaNet heads of a layer that have nonzero key rows, with their slices of
    every projection, the conv weights and the decay parameters."""

    module: Any
    heads: torch.Tensor  # value heads
    channels: torch.Tensor  # their conv channels: q and k of their key heads, then v
    qkv: torch.Tensor
    conv: torch.Tensor
    z: torch.Tensor
    b: torch.Tensor
    a: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    out: torch.Tensor
    split: tuple[int, int, int]

    @classmethod
    def of(cls, attn: Any) -> LiveDeltaNet | None:
        if attn.conv1d.bias is not None:
            return None  # a bias could write heads with zero rows: not a circuit layer
        nk, nv, dk, dv = attn.num_k_heads, attn.num_v_heads, attn.head_k_dim, attn.head_v_dim
        weight = attn.in_proj_qkv.weight
        hidden = weight.shape[1]
        key_rows = weight[attn.key_dim : 2 * attn.key_dim].reshape(nk, dk * hidden)
        key_heads = _nonzero_rows(key_rows).nonzero().squeeze(1)
        if len(key_heads) == nk:
            return None
        group = nv // nk  # value heads served by one key head, consecutive
        heads = (key_heads[:, None] * group + torch.arange(group)).flatten()
        k_channels = (key_heads[:, None] * dk + torch.arange(dk)).flatten()
        v_channels = (heads[:, None] * dv + torch.arange(dv)).flatten()
        channels = torch.cat([k_channels, attn.key_dim + k_channels, 2 * attn.key_dim + v_channels])
        return cls(
            module=attn,
            heads=heads,
            channels=channels,
            qkv=weight[channels],
            conv=attn.conv1d.weight.squeeze(1)[channels],
            z=attn.in_proj_z.weight[v_channels],
            b=attn.in_proj_b.weight[heads],
            a=attn.in_proj_a.weight[heads],
            A_log=attn.A_log[heads],
            dt_bias=attn.dt_bias[heads],
            out=attn.out_proj.weight[:, v_channels].contiguous(),
            split=(len(k_channels), len(k_channels), len(v_channels)),
        )

    def forward(
        self,
        hidden_states: torch.Tensor,
        cache: Any = None,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        attn = self.module
        index = attn.layer_idx
        decode = (
            cache is not None
            and hidden_states.shape[1] == 1
            and cache.get_conv_state(index) is not None
            and cache.get_recurrent_state(index) is not None
            and not cache.is_recording_past(index)
        )
        if not decode:  # prefill: transformers' own path, every head
            return type(attn).forward(attn, hidden_states, cache, attention_mask, **kwargs)
        x = qwen3_5.apply_mask_to_padding_states(hidden_states, attention_mask)
        batch = x.shape[0]
        if len(self.heads) == 0:
            return x.new_zeros(batch, 1, self.out.shape[0])

        conv_state = cache.get_conv_state(index)
        window = conv_state[:, self.channels]  # updated by the conv, then put back
        mixed = qwen3_5.causal_conv1d_update(
            F.linear(x, self.qkv).transpose(1, 2), window, self.conv, None, attn.activation
        )
        conv_state[:, self.channels] = window
        query, key, value = torch.split(mixed.transpose(1, 2), self.split, dim=-1)
        query = query.reshape(batch, 1, -1, attn.head_k_dim)
        key = key.reshape(batch, 1, -1, attn.head_k_dim)
        value = value.reshape(batch, 1, -1, attn.head_v_dim)
        beta = F.linear(x, self.b).sigmoid()
        g = -self.A_log.float().exp() * F.softplus(F.linear(x, self.a).float() + self.dt_bias)

        state = cache.get_recurrent_state(index)
        cells = state[:, self.heads]
        core, cells = qwen3_5.torch_recurrent_gated_delta_rule(
            query, key, value, g=g, beta=beta, initial_state=cells,
            output_final_state=True, use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        state[:, self.heads] = cells

        z = F.linear(x, self.z).reshape(-1, attn.head_v_dim)
        core = attn.norm(core.reshape(-1, attn.head_v_dim), z).reshape(batch, 1, -1)
        return F.linear(core, self.out)


@dataclass
class SilentAttention:
    """A full-attention layer whose k, v and o projections are all zero: it caches zero keys
    and values (k_norm and RoPE keep 0 at 0) and outputs o_proj(...) = 0. Its q_proj may
    hold anything finite (the circuit's holds the muted output gate)."""

    module: Any

    @classmethod
    def of(cls, attn: Any) -> SilentAttention | None:
        silent = (attn.k_proj, attn.v_proj, attn.o_proj)
        if any(bool(p.weight.ne(0).any()) or p.bias is not None for p in silent):
            return None
        return cls(attn)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: Any = None,
        attention_mask: torch.Tensor | None = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        attn = self.module
        batch, steps, width = hidden_states.shape
        if cache is not None:  # k_norm(0) and v are 0: the keys and values it would cache
            heads = attn.config.num_key_value_heads
            zero = hidden_states.new_zeros(batch, heads, steps, attn.head_dim)
            layer = cache.layers[attn.layer_idx]
            if type(layer) is DynamicLayer and layer.is_initialized:
                # the same zeros as cat(keys, zero) holds, as one broadcast row: no copy of
                # the cache per token, whose cost would grow with its length
                length = layer.get_seq_length() + steps
                layer.keys = layer.values = zero[:, :, :1].expand(-1, -1, length, -1)
            else:
                cache.update(zero, zero, attn.layer_idx, kwargs=kwargs)
        return hidden_states.new_zeros(batch, steps, width), None


class LiveParts:
    """Each decoder layer's skippable modules and their live-part forwards."""

    def __init__(self, forwards: dict[Any, Any]) -> None:
        self.forwards = forwards

    @classmethod
    def of(cls, model: Any) -> LiveParts:
        forwards: dict[Any, Any] = {}
        with torch.no_grad():
            for layer in model.model.layers:
                parts = [(layer.mlp, LiveMlp.of(layer.mlp))]
                if getattr(layer, "linear_attn", None) is not None:
                    parts.append((layer.linear_attn, LiveDeltaNet.of(layer.linear_attn)))
                if getattr(layer, "self_attn", None) is not None:
                    parts.append((layer.self_attn, SilentAttention.of(layer.self_attn)))
                forwards.update({m: live.forward for m, live in parts if live is not None})
        return cls(forwards)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The live-part forwards in place of the modules' own, inside the block."""
        try:
            for module, forward in self.forwards.items():
                module.forward = forward  # an instance attribute: nn.Module calls it
            yield
        finally:
            for module in self.forwards:
                module.__dict__.pop("forward", None)
