"""The CPU decode kernel: the gated delta rule for one token, updating the state in place.

Each decode pass calls, in every DeltaNet layer, transformers' recurrent kernel
`torch_recurrent_gated_delta_rule` (`fla`'s fused kernel on CUDA when installed). On the
CPU the torch kernel is a large part of a decode pass: it builds every intermediate as a
full (batch, heads, 128, 128) tensor, about a dozen passes over the state per layer and
token. `recurrent_gated_delta_rule` computes the same recurrence for each token t,

    S = exp(g_t) S;  delta = beta_t (v_t - k_t^T S);  S = S + k_t delta^T;  o_t = q_t^T S

with the decay in place (skipped when exp(g) is exactly 1 everywhere, as in every circuit
layer, whose heads never forget), k^T S and q^T S as batched (1 x 128) @ (128 x 128)
products and the rank-1 update as an in-place `baddbmm_`: three or four passes over the
state. Heads whose beta is exactly 0 write nothing (delta = 0), so only the others are
updated: in the circuit's layers that is the few memories a token writes, and the rest
cost one pass (the read q^T S). On the machine's states (one-hot keys, exact small values,
docs/circuit.md) it gives the reference kernel's numbers bit for bit
(tests/machine/test_model_launch.py); on arbitrary data it differs from it by float32
rounding only (the sums run in another order).

`sparse_rows_delta_rule` is the same step for the circuit's memories, called by their
layers' live parts (host.live_decode): with no decay and keys and queries nonzero on a
few rows (one-hot keys, two-hot queries), it reads and writes those rows of each head
only, in place in the cache's state, instead of whole 128 x 128 heads.

`installed(model)` puts it in the layers' module for the length of a `with` block (the
same function slot transformers fills with `fla`), only for a Qwen3.5 model on the CPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

DECODE_KERNEL_SLOT = "torch_recurrent_gated_delta_rule"
"""The module function Qwen3_5GatedDeltaNet.forward calls for a one-token cached pass."""


def recurrent_gated_delta_rule(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    **_kernel_options: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' torch_recurrent_gated_delta_rule (same arguments, same results up to
    float32 summation order). A float32, contiguous `initial_state` is updated in place:
    the caller's cache holds the state it returns, as it does the reference's."""
    out_dtype = query.dtype
    batch, steps, _, k_dim = key.shape
    v_heads, v_dim = value.shape[-2:]
    query, key = _grouped(query, key, v_heads)
    # [batch, heads, steps, dim] in float32, as the reference
    query, key, value, beta, g = (
        x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
        for x in (query, key, value, beta, g)
    )
    query, key = _normalized(query, key, use_qk_l2norm_in_kernel)

    if initial_state is None:
        state = value.new_zeros(batch, v_heads, k_dim, v_dim)
    else:
        state = initial_state.to(torch.float32).contiguous()
    cells = state.view(batch * v_heads, k_dim, v_dim)  # one (k_dim x v_dim) matrix per head
    out = torch.empty_like(value)
    heads = batch * v_heads
    for t in range(steps):
        k_t = key[:, :, t].reshape(heads, 1, k_dim)
        v_t = value[:, :, t].reshape(heads, 1, v_dim)
        decay = g[:, :, t].exp()
        if not bool((decay == 1).all()):  # circuit heads keep their state: x * 1 == x exactly
            cells.mul_(decay.reshape(heads, 1, 1))
        beta_t = beta[:, :, t].reshape(heads, 1, 1)
        writing = beta_t.view(heads) != 0  # beta 0: delta is 0, the state stays as it is
        if bool(writing.all()):
            _delta_write(cells, k_t, v_t, beta_t)
        elif bool(writing.any()):  # the circuit's muted heads write nothing: skip them
            rows = writing.nonzero().squeeze(1)
            written = cells.index_select(0, rows)
            _delta_write(written, k_t[rows], v_t[rows], beta_t[rows])
            cells.index_copy_(0, rows, written)
        out[:, :, t] = torch.bmm(query[:, :, t].reshape(heads, 1, k_dim), cells).view(
            batch, v_heads, v_dim
        )
    core_out = out.transpose(1, 2).contiguous().to(out_dtype)
    return core_out, state if output_final_state else None


def _grouped(
    query: torch.Tensor, key: torch.Tensor, v_heads: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped values: each key head serves consecutive value heads (dim 2 holds heads)."""
    k_heads = key.shape[2]
    if k_heads == v_heads:
        return query, key
    group = v_heads // k_heads
    return query.repeat_interleave(group, dim=2), key.repeat_interleave(group, dim=2)


def _normalized(
    query: torch.Tensor, key: torch.Tensor, l2: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference's float32 arithmetic: both L2-normalised (when asked), then the query
    divided by sqrt(k_dim); both kernels share it, so their reads agree to the bit."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import l2norm

    if l2:
        query = l2norm(query, dim=-1, eps=1e-6)
        key = l2norm(key, dim=-1, eps=1e-6)
    return query / (query.shape[-1] ** 0.5), key


def _delta_write(cells: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> None:
    """The delta rule's write, in place: S += k (beta (v - k^T S))^T for each head's S."""
    delta = (v - torch.bmm(k, cells)) * beta
    cells.baddbmm_(k.transpose(1, 2), delta)


SPARSE_ROWS_MAX = 4
"""The most nonzero key or query entries per head for which `sparse_rows_delta_rule`
gathers rows; denser tokens take the dense kernel."""


def sparse_rows_delta_rule(
    state: torch.Tensor,
    heads: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    beta: torch.Tensor,
) -> torch.Tensor | None:
    """One token of the gated delta rule, without decay, on the value heads `heads` of
    `state` (batch, heads, k_dim, v_dim; float32, updated in place), touching only the
    state rows where the token's key or query is nonzero; None (and `state` untouched)
    when some head's key or query has more than SPARSE_ROWS_MAX nonzero entries.

    With k nonzero on rows R and q on rows Q, k^T S is the sum over R of k_r S[r], the
    write S += k delta^T changes only rows R, and q^T S sums over Q: the dense kernel's
    terms less exact zeros. query, key: (batch, 1, key heads, k_dim); value: (batch, 1,
    value heads, v_dim); beta: (batch, 1, value heads). Returns the output as `query`'s
    dtype, (batch, 1, value heads, v_dim). The rows are gathered and written back by
    flat index into `state` viewed as (cells, v_dim). The circuit's memories (one-hot
    keys, two-hot queries, decay exactly 1) read and write one or two rows of 128 per head
    this way."""
    out_dtype = query.dtype
    batch, v_heads = value.shape[0], value.shape[2]
    query, key = _grouped(query, key, v_heads)
    query, key, value, beta = (x[:, 0].to(torch.float32) for x in (query, key, value, beta))
    query, key = _normalized(query, key, True)
    k_rows, q_rows = (int(x.ne(0).sum(-1).max()) for x in (key, query))
    if max(k_rows, q_rows) > SPARSE_ROWS_MAX:
        return None
    k_dim, v_dim = state.shape[-2:]
    cells_of = state.view(-1, v_dim)  # every (batch, head, row) cell's row, in place
    # the cell row of (b, heads[h], r) is (b * state heads + heads[h]) * k_dim + r
    head_base = (
        torch.arange(batch, device=state.device)[:, None] * state.shape[1] + heads[None, :]
    ) * k_dim

    def nonzero_rows(x: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The `count` largest-magnitude entries of each head's vector (its nonzero ones,
        padded with zeros at other rows): their flat cell rows and values."""
        rows = x.abs().topk(count, dim=-1).indices
        return (head_base[..., None] + rows).flatten(), x.gather(-1, rows)

    if k_rows:
        at, k = nonzero_rows(key, k_rows)
        cells = cells_of.index_select(0, at).view(*k.shape, v_dim)  # (batch, heads, rows, v)
        delta = (value - (k[..., None] * cells).sum(-2)) * beta[..., None]
        written = cells + k[..., None] * delta[:, :, None]
        cells_of.index_copy_(0, at, written.view(-1, v_dim))
    if not q_rows:
        return value.new_zeros(batch, 1, v_heads, v_dim).to(out_dtype)
    at, q = nonzero_rows(query, q_rows)
    read = cells_of.index_select(0, at).view(*q.shape, v_dim)
    out = (q[..., None] * read).sum(-2)
    return out[:, None].to(out_dtype)


@contextlib.contextmanager
def installed(model: Any) -> Iterator[bool]:
    """Decode `model` with recurrent_gated_delta_rule inside the block, when it is a Qwen3.5
    model on the CPU (elsewhere transformers' own choice, e.g. fla on CUDA, stays); yields
    whether it did. Not thread-safe: the slot is a module global."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5

    device = getattr(model, "device", None)
    mine = getattr(model.config, "model_type", "").startswith("qwen3_5") and (
        device is not None and torch.device(device).type == "cpu"
    )
    if not mine:
        yield False
        return
    reference = getattr(qwen3_5, DECODE_KERNEL_SLOT)
    setattr(qwen3_5, DECODE_KERNEL_SLOT, recurrent_gated_delta_rule)
    try:
        yield True
    finally:
        setattr(qwen3_5, DECODE_KERNEL_SLOT, reference)
