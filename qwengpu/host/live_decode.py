"""Forward passes over the live part of each layer: the circuit's zero weights skipped.

A circuit layer fills a fraction of its decoder layer (`qgpu inspect`): some MLP neurons,
some DeltaNet heads, a few dozen weights per row, and its full-attention layers are all
zero. Qwen3.5's modules compute every neuron, head and weight regardless.
`LiveParts.of(model)` finds, from the weights alone, what in each layer can change its
output or its state, and `installed` gives those modules, for the length of a `with`
block, forwards over that part only:

- MLP (every pass): neuron n adds silu(g_n . x) (u_n . x) d_n, exactly 0 when its gate
  row, up row or down column is all zero, so only the others are computed.
- DeltaNet: a head whose key rows are all zero never writes its state (the delta rule
  writes k delta^T) and reads 0 from it (the state starts at 0), so its output is 0; only
  the other heads are projected, convolved, updated and read (a layer with none puts
  nothing in the cache: its state would stay 0, 1 MB a sequence). A prefill onto an empty
  cache runs transformers' chunked rule on them (the others' states stay 0); a one-token
  pass with the cache runs the delta rule on the rows its keys and queries touch
  (decode_kernel.sparse_rows_delta_rule: the memories' one-hot keys and two-hot queries
  touch one or two of 128), or on whole heads when they touch more.
- Projections (LiveLinear): a live slice with few nonzero weights runs as a sparse
  product over them; the circuit's gates read a few dozen of the residual's channels.
  The sparse projections of one input run as one stacked product (LiveLinears).
- Launch tokens: on a one-token pass every row's token is a launch token, which is
  exactly 0 on the circuit's mute dims in every circuit layer (`launch_zero`); those
  columns are left out of the projections (the muted gate rows read them), which makes
  the gates sparse too.
- Conv windows: a decode pass updates the live channels' windows in place, as slices of
  the cache's (one per contiguous run of channels), not gathered and scattered. Where
  every live channel's kernel is 1 on the current token and 0 before (the circuit's), the
  conv is the activation of the projection: the windows, which nothing reads, are left.
- Full attention with all-zero k, v and o projections (every pass): the output is 0
  whatever the queries (the circuit's q_proj holds only its muted output gate); the
  layer's cache still grows by one zero key and value per token, as transformers' would
  (the cache's length gives the positions), held as one broadcast zero row, not copied.

The skipped terms are exact zeros, so each output is the same sum without them; the sums
of the live terms may run in another order than the full matrix products'. On the
machine's launches every token and every DeltaNet state comes out as transformers' to
the bit, fed in one prefill and token by token (tests/machine/test_model_launch.py).
Layers without skippable parts (the base model's) keep their modules' forwards.
ModelBackend.launch_many installs them on the CPU, with the decode kernel
(host.decode_kernel).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5
from transformers.cache_utils import DynamicLayer

from qwengpu.host.decode_kernel import sparse_rows_delta_rule


def _nonzero_rows(weight: torch.Tensor) -> torch.Tensor:
    return weight.ne(0).any(dim=1)


SPARSE_DENSITY_MAX = 0.05
"""The largest fraction of nonzero weights a live projection runs as a sparse product;
denser ones stay dense. The circuit's are far below it (its gates read a few dozen of the
residual's channels), the base model's far above."""


def _sparse(weight: torch.Tensor) -> bool:
    """Whether a live slice runs as a sparse product: some nonzeros, at most
    SPARSE_DENSITY_MAX of its entries."""
    return 0 < int(weight.count_nonzero()) <= SPARSE_DENSITY_MAX * weight.numel()


class LiveLinear:
    """y = x W^T for a live slice W of a projection: a dense product, or for a sparse W a
    float32 CSR product over W's nonzero entries, rounded once to x's dtype. The dense
    product accumulates in float32 as well (bf16 included), so both sum the same terms,
    less exact zeros, in another order."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.shape = tuple(weight.shape)
        self.sparse = _sparse(weight)
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
            warnings.filterwarnings("ignore", "Sparse CSR", UserWarning)
            self.weight = weight.float().to_sparse_csr() if self.sparse else weight.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # 2-D: some 3-D bf16 products run ~100x slower
        if self.sparse:  # a contiguous right operand, for the same reason
            out = (self.weight @ flat.to(torch.float32).t().contiguous()).t().to(x.dtype)
        else:
            out = F.linear(flat, self.weight)
        return out.reshape(*x.shape[:-1], self.shape[0])


class LiveLinears:
    """Several projections of one input: the sparse ones stacked into one CSR product (a
    pass pays one product's overhead for all of them; a CSR product sums each output row
    on its own, so stacking changes no output's terms or their order), the dense ones each
    a LiveLinear. Calling it returns every projection's output, in the given order."""

    def __init__(self, *weights: torch.Tensor) -> None:
        self.sparse = [i for i, w in enumerate(weights) if _sparse(w)]
        self.dense = {i: LiveLinear(w) for i, w in enumerate(weights) if i not in self.sparse}
        self.widths = [weights[i].shape[0] for i in self.sparse]
        self.stack = (
            LiveLinear(torch.cat([weights[i] for i in self.sparse])) if self.sparse else None
        )

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = {i: linear(x) for i, linear in self.dense.items()}
        if self.stack is not None:
            parts = torch.split(self.stack(x), self.widths, dim=-1)
            out.update(zip(self.sparse, parts, strict=True))
        return tuple(out[i] for i in range(len(out)))


@dataclass
class LiveMlp:
    """The neurons of a SwiGLU MLP whose gate, up and down weights are all nonzero."""

    gate_up: LiveLinears
    launch_gate_up: LiveLinears  # the same without the launch-zero columns (one-token passes)
    down: LiveLinear
    act: Any
    hidden: int

    @classmethod
    def of(cls, mlp: Any, launch_zero: torch.Tensor | None = None) -> LiveMlp | None:
        gate, up, down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
        live = _nonzero_rows(gate) & _nonzero_rows(up) & _nonzero_rows(down.t())
        if bool(live.all()):
            return None  # nothing to skip: the module's own forward
        rows = live.nonzero().squeeze(1)
        gate_up = [gate[rows], up[rows]]
        products = LiveLinears(*gate_up)
        return cls(
            products,
            _launch_products(gate_up, launch_zero, products),
            LiveLinear(down[:, rows]),
            mlp.act_fn,
            down.shape[0],
        )

    @property
    def neurons(self) -> int:
        return self.down.shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.neurons == 0:
            return x.new_zeros(*x.shape[:-1], self.hidden)
        gate, up = (self.launch_gate_up if x.shape[1] == 1 else self.gate_up)(x)
        return self.down(self.act(gate) * up)


def _launch_products(
    weights: list[torch.Tensor], launch_zero: torch.Tensor | None, products: LiveLinears
) -> LiveLinears:
    """The products of `weights` for one-token passes: without the launch-zero columns, or
    `products` itself when there are none (no second copy of the same weights)."""
    if launch_zero is None or not len(launch_zero):
        return products
    return LiveLinears(*(_without(w, launch_zero) for w in weights))


def _without(weight: torch.Tensor, columns: torch.Tensor | None) -> torch.Tensor:
    """`weight` with `columns` zeroed: the same product on inputs that are 0 there."""
    if columns is None or not len(columns):
        return weight
    weight = weight.clone()
    weight[:, columns] = 0
    return weight


def _runs(channels: torch.Tensor) -> list[tuple[int, int, int]]:
    """The contiguous runs of an ascending-by-run channel list, as (first, end, position in
    the list): a decode pass updates each run's conv windows as a slice of the cache's, in
    place (gathering and scattering the windows by index cost ten times more)."""
    runs: list[tuple[int, int, int]] = []
    for at, c in enumerate(channels.tolist()):
        if runs and c == runs[-1][1]:
            runs[-1] = (runs[-1][0], c + 1, runs[-1][2])
        else:
            runs.append((c, c + 1, at))
    return runs


@dataclass
class LiveDeltaNet:
    """The DeltaNet heads of a layer that have nonzero key rows, with their slices of
    every projection, the conv weights and the decay parameters."""

    module: Any
    heads: torch.Tensor  # value heads
    channels: torch.Tensor  # their conv channels: q and k of their key heads, then v
    runs: list[tuple[int, int, int]]  # channels' contiguous runs: (first, end, at in channels)
    inputs: LiveLinears  # their rows of the qkv, z, b and a projections of the input
    launch_inputs: LiveLinears  # the same without the launch-zero columns (one-token passes)
    conv: torch.Tensor
    identity_conv: bool  # every live channel's kernel is 1 on the current token, 0 before
    never_decays: bool  # exp(A_log) is 0 on every live head: g = -0, the decay exactly 1
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    out: LiveLinear
    split: tuple[int, int, int]

    @classmethod
    def of(cls, attn: Any, launch_zero: torch.Tensor | None = None) -> LiveDeltaNet | None:
        if attn.conv1d.bias is not None:
            return None  # a bias could write heads with zero rows: not a circuit layer
        nk, nv, dk, dv = attn.num_k_heads, attn.num_v_heads, attn.head_k_dim, attn.head_v_dim
        weight = attn.in_proj_qkv.weight
        hidden = weight.shape[1]
        key_rows = weight[attn.key_dim : 2 * attn.key_dim].reshape(nk, dk * hidden)
        key_heads = _nonzero_rows(key_rows).nonzero().squeeze(1)
        if len(key_heads) == nk and not _sparse(weight):
            return None  # every head, dense projections: the module's own forward
        group = nv // nk  # value heads served by one key head, consecutive
        heads = (key_heads[:, None] * group + torch.arange(group)).flatten()
        k_channels = (key_heads[:, None] * dk + torch.arange(dk)).flatten()
        v_channels = (heads[:, None] * dv + torch.arange(dv)).flatten()
        channels = torch.cat([k_channels, attn.key_dim + k_channels, 2 * attn.key_dim + v_channels])
        projections = [
            weight[channels],
            attn.in_proj_z.weight[v_channels],
            attn.in_proj_b.weight[heads],
            attn.in_proj_a.weight[heads],
        ]
        conv = attn.conv1d.weight.squeeze(1)[channels]
        inputs = LiveLinears(*projections)
        return cls(
            module=attn,
            heads=heads,
            channels=channels,
            runs=_runs(channels),
            inputs=inputs,
            launch_inputs=_launch_products(projections, launch_zero, inputs),
            conv=conv,
            identity_conv=bool((conv[:, :-1] == 0).all() and (conv[:, -1] == 1).all()),
            never_decays=bool((attn.A_log[heads].float().exp() == 0).all()),
            A_log=attn.A_log[heads],
            dt_bias=attn.dt_bias[heads],
            out=LiveLinear(attn.out_proj.weight[:, v_channels]),
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
        cached = cache is not None and not cache.is_recording_past(index)
        has_state = cached and cache.get_recurrent_state(index) is not None
        conv_state = cache.get_conv_state(index) if cached else None
        if cached and not has_state and conv_state is None:
            decode = False  # the first pass on an empty cache: a prefill from zero states
        elif has_state and conv_state is not None and hidden_states.shape[1] == 1:
            decode = True
        else:  # anything else (no cache, a prefill onto earlier states): every head
            return type(attn).forward(attn, hidden_states, cache, attention_mask, **kwargs)
        batch, steps, _ = hidden_states.shape
        if len(self.heads) == 0:  # nothing to write or read: no windows, no state (all 0)
            return hidden_states.new_zeros(batch, steps, self.out.shape[0])
        x = qwen3_5.apply_mask_to_padding_states(hidden_states, attention_mask)
        mixed, z, b, a = (self.launch_inputs if steps == 1 else self.inputs)(x)
        mixed = mixed.transpose(1, 2)  # (batch, live channels, steps)
        if decode and self.identity_conv:  # the window's older inputs weigh 0: unread
            mixed = qwen3_5.ACT2FN[attn.activation](mixed)
        elif decode:  # each run's windows updated in place, a view of the cache's
            mixed = torch.cat(
                [
                    qwen3_5.causal_conv1d_update(
                        mixed[:, at : at + end - first],
                        conv_state[:, first:end],
                        self.conv[at : at + end - first],
                        None,
                        attn.activation,
                    )
                    for first, end, at in self.runs
                ],
                dim=1,
            )
        else:
            mixed = self._prefill_conv(cache, mixed, **kwargs)
        query, key, value = torch.split(mixed.transpose(1, 2), self.split, dim=-1)
        query = query.reshape(batch, steps, -1, attn.head_k_dim)
        key = key.reshape(batch, steps, -1, attn.head_k_dim)
        value = value.reshape(batch, steps, -1, attn.head_v_dim)
        beta = b.sigmoid()

        def decay() -> torch.Tensor:  # the log decay g per token and head
            return -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)

        if decode:
            state = cache.get_recurrent_state(index)
            core = self._decode_rule(state, query, key, value, decay, beta)
        else:  # transformers' chunked rule on the live heads; the others' states stay 0
            core, cells = qwen3_5.torch_chunk_gated_delta_rule(
                query, key, value, g=decay(), beta=beta, initial_state=None,
                output_final_state=True, use_qk_l2norm_in_kernel=True,
            )  # fmt: skip
            self._zero_states(cache, x)[:, self.heads] = cells

        z = z.reshape(-1, attn.head_v_dim)
        core = attn.norm(core.reshape(-1, attn.head_v_dim), z).reshape(batch, steps, -1)
        return self.out(core)

    def _zero_states(self, cache: Any, x: torch.Tensor) -> torch.Tensor:
        """A prefill's cache entries before its live heads' are put in: zero conv windows
        (unless _prefill_conv set them) and zero recurrent states; returns the latter."""
        attn = self.module
        if cache.get_conv_state(attn.layer_idx) is None:
            self._zero_windows(cache, x)
        shape = (x.shape[0], attn.num_v_heads, attn.head_k_dim, attn.head_v_dim)
        cache.update_recurrent_state(x.new_zeros(shape, dtype=torch.float32), attn.layer_idx)
        return cache.get_recurrent_state(attn.layer_idx)

    def _zero_windows(self, cache: Any, x: torch.Tensor) -> torch.Tensor:
        """Zero conv windows for every channel of the layer, in the cache; returns them."""
        attn = self.module
        channels = 2 * attn.key_dim + attn.value_dim
        window = x.new_zeros(x.shape[0], channels, attn.conv_kernel_size)
        cache.update_conv_state(window, attn.layer_idx)
        return cache.get_conv_state(attn.layer_idx)

    def _prefill_conv(self, cache: Any, mixed: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The causal conv over a prefill's live channels, from a zero window, leaving the
        last conv_kernel_size inputs of each in the cache as transformers' update does (the
        other channels' windows 0: nothing reads them)."""
        attn = self.module
        width = attn.conv_kernel_size
        steps = mixed.shape[-1]
        padded = F.pad(mixed, (max(0, width - steps), 0))
        self._zero_windows(cache, mixed)[:, self.channels] = padded[..., -width:]
        mixed = qwen3_5.causal_conv1d_fn(
            padded, self.conv, None, activation=attn.activation, **kwargs
        )
        return mixed[:, :, -steps:]

    def _decode_rule(self, state, query, key, value, decay, beta) -> torch.Tensor:
        """One token of the delta rule on the live heads' cells of `state`, in place;
        `decay()` gives the token's log decay g."""
        if self.never_decays or bool((decay().exp() == 1).all()):  # the memories' rows alone
            core = sparse_rows_delta_rule(state, self.heads, query, key, value, beta)
            if core is not None:
                return core
        cells = state[:, self.heads]
        core, cells = qwen3_5.torch_recurrent_gated_delta_rule(
            query, key, value, g=decay(), beta=beta, initial_state=cells,
            output_final_state=True, use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        state[:, self.heads] = cells
        return core


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
    def of(cls, model: Any, launch_zero: dict[int, torch.Tensor] | None = None) -> LiveParts:
        """The live parts of `model`'s layers. `launch_zero[i]`: residual dims exactly 0 in
        layer i on every launch token (the circuit's mute dims), whose weights one-token
        passes leave out (a launch's passes after its first forward hold launch tokens
        only; a prefill's left padding is text)."""
        forwards: dict[Any, Any] = {}
        with torch.no_grad():
            for i, layer in enumerate(model.model.layers):
                zero = (launch_zero or {}).get(i)
                parts = [(layer.mlp, LiveMlp.of(layer.mlp, zero))]
                if getattr(layer, "linear_attn", None) is not None:
                    attn = layer.linear_attn
                    parts.append((attn, LiveDeltaNet.of(attn, zero)))
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
