"""Emission: fill every parameter of real `Qwen3_5DecoderLayer` modules from a schedule.

Each layer's parameters are built as float64 arrays whose entries are all exactly
representable in bfloat16 (checked), so one set of weights is the same model in float32
and bfloat16. Conventions (docs/circuit.md derives them):

  * both RMSNorms: weight 0 (Qwen3.5 scales by 1 + weight = 1); circuit tokens' anchors
    make the norm an exact multiplication by 2^-s, so a channel holding v reads v * 2^-s
    and an anchor reads `unit` = 2^t: a linear form sum c_i x_i + b is the row
    c_i * 2^s on each channel plus b / unit on the first anchor channel.
  * MLP: gate_proj row = LOGIC_GAIN * gate, up_proj row = up, down_proj column =
    out / LOGIC_GAIN, one column per (merged) neuron; unused neurons are all zero.
  * Gated DeltaNet: see memory.py. conv1d taps [0, 0, 0, 1] (current token only), A_log =
    -8192 (no decay), dt_bias = 0, in_proj_a = 0, gated-norm weight 1. Unused heads have
    beta = sigmoid(-128) = 0 and z = 0.
  * Full-attention layers: q/k/v/o projections all zero, so the attention adds exactly 0;
    their MLP is used like any other.

Gate-like rows (MLP gates, z and beta rows) are recorded so `mute.py` can add the muting
term to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from qwengpu.circuit import craft
from qwengpu.circuit.craft import Lin, Neuron
from qwengpu.circuit.geometry import FULL, LINEAR
from qwengpu.circuit.memory import (
    BETA_OFF,
    HEAD_ROWS,
    PRESENCE_CHANNEL,
    PRESENCE_PREACTIVATION,
    beta_preactivation,
    key_preactivations,
    out_scale,
    value_preactivation,
    z_preactivation,
)
from qwengpu.circuit.numerics import A_LOG_NO_DECAY, LOGIC_GAIN, is_bf16_exact
from qwengpu.circuit.schedule import LayerPlan, Schedule
from qwengpu.errors import CircuitError

CONV_CURRENT_TOKEN_ONLY = (0.0, 0.0, 0.0, 1.0)
"""conv1d taps: only the last tap (the current token) is 1; past tokens never mix in."""


@dataclass
class EmittedLayer:
    """The parameters of one decoder layer (float32 arrays, every entry bfloat16-exact)."""

    index: int
    kind: str
    params: dict[str, np.ndarray]
    gate_rows: dict[str, np.ndarray] = field(default_factory=dict)  # muted rows per param
    neurons: int = 0

    def state_dict(self, dtype=None) -> dict:
        """The parameters as tensors; in float32 they share the arrays' memory (a 2B
        machine's layers are about 10 GB: a model loading them with `assign=True` does
        not hold a second copy). Read-only: muting is done before."""
        import torch

        dtype = dtype or torch.float32
        if dtype is torch.float32:
            return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in self.params.items()}
        return {k: torch.tensor(v, dtype=dtype) for k, v in self.params.items()}


class _Rows:
    """Writes linear forms as rows over the residual, against the schedule's dims."""

    def __init__(self, schedule: Schedule) -> None:
        self.s = schedule
        self.hidden = schedule.geometry.hidden
        self.scale = Fraction(2) ** schedule.anchors.norm_shift
        self.unit = Fraction(schedule.anchors.unit).limit_denominator()
        self.anchor = schedule.anchors.dims[0]

    def row(self, lin: Lin, gain: Fraction | int = 1) -> np.ndarray:
        r = np.zeros(self.hidden)
        self.add(r, lin, gain)
        return r

    def add(self, r: np.ndarray, lin: Lin, gain: Fraction | int = 1) -> None:
        for sig, coef in lin.terms.items():
            r[self.s.dim_of(sig)] += float(gain * coef * self.scale)
        if lin.const:
            r[self.anchor] += float(gain * lin.const / self.unit)


def _mlp_params(plan: LayerPlan, rows: _Rows, intermediate: int) -> tuple[dict, np.ndarray, int]:
    hidden = rows.hidden
    gate = np.zeros((intermediate, hidden))
    up = np.zeros((intermediate, hidden))
    down = np.zeros((hidden, intermediate))
    # Merge once more on residual dims: in-place updates make some outputs cancel.
    merged: list[tuple[Neuron, dict[int, Fraction]]] = []
    for n in craft.merge_neurons(plan.neurons.values()):
        outs: dict[int, Fraction] = {}
        for sig, coef in n.out.items():
            d = rows.s.dim_of(sig)
            outs[d] = outs.get(d, Fraction(0)) + coef
        outs = {d: c for d, c in outs.items() if c}
        if outs:
            merged.append((n, outs))
    if len(merged) > intermediate:
        raise CircuitError(f"layer {plan.index}: {len(merged)} neurons > MLP width {intermediate}")
    for j, (n, outs) in enumerate(merged):
        rows.add(gate[j], n.gate, LOGIC_GAIN)
        rows.add(up[j], n.up)
        for d, coef in outs.items():
            down[d, j] = float(coef / LOGIC_GAIN)
    params = {"mlp.gate_proj.weight": gate, "mlp.up_proj.weight": up, "mlp.down_proj.weight": down}
    # every row is muted, the unused ones too: a checkpoint's muting proof then needs no
    # argument about which units are dead (circuit tokens are 0 on the mute dims anyway)
    return params, np.arange(intermediate), len(merged)


def _linear_attention_params(plan: LayerPlan, rows: _Rows) -> tuple[dict, dict]:
    g = rows.s.geometry
    hidden, kd, vd = g.hidden, g.key_dim, g.value_dim
    nv = g.linear_value_heads
    qkv = np.zeros((g.conv_dim, hidden))
    z = np.zeros((vd, hidden))
    b = np.zeros((nv, hidden))
    out = np.zeros((hidden, vd))
    for vh in range(nv):
        rows.add(b[vh], BETA_OFF)  # no writes unless a memory claims the head
    for slot in plan.slots:
        mem = slot.memory
        write, read = slot.write, slot.read
        for kh in slot.key_heads:
            if write is not None:
                for r, pre in enumerate(key_preactivations(write.addr, mem.rows)):
                    rows.add(qkv[kd + kh * HEAD_ROWS + r], pre)
            if read is not None:
                for r, pre in enumerate(key_preactivations(read.addr, mem.rows)):
                    rows.add(qkv[kh * HEAD_ROWS + r], pre)
        for vh in slot.value_heads:
            b[vh] = 0
            rows.add(b[vh], beta_preactivation(write.when) if write is not None else BETA_OFF)
            rows.add(qkv[2 * kd + vh * HEAD_ROWS + PRESENCE_CHANNEL], PRESENCE_PREACTIVATION)
        channel_map = slot.channel_map()
        if write is not None:
            sigs = [s for f in write.data for s in f.sigs()]
            for sig, (vh, col) in zip(sigs, channel_map, strict=True):
                rows.add(qkv[2 * kd + vh * HEAD_ROWS + col], value_preactivation(sig))
        if read is not None and slot.landing is not None:
            zpre = z_preactivation(read.when)
            for i, (vh, col) in enumerate(channel_map):
                zrow = vh * HEAD_ROWS + col
                rows.add(z[zrow], zpre)
                out[rows.s.dims[slot.landing.name][i], zrow] = float(out_scale(False))
            if read.valid is not None:
                vh = slot.value_heads[0]
                zrow = vh * HEAD_ROWS + PRESENCE_CHANNEL
                rows.add(z[zrow], zpre)
                out[rows.s.dims[slot.landing.name][mem.width], zrow] = float(out_scale(True))
    conv = np.tile(np.array(CONV_CURRENT_TOKEN_ONLY), (g.conv_dim, 1, 1))
    params = {
        "linear_attn.dt_bias": np.zeros(nv),
        "linear_attn.A_log": np.full(nv, A_LOG_NO_DECAY),
        "linear_attn.conv1d.weight": conv,
        "linear_attn.norm.weight": np.ones(g.linear_value_dim),
        "linear_attn.out_proj.weight": out,
        "linear_attn.in_proj_qkv.weight": qkv,
        "linear_attn.in_proj_z.weight": z,
        "linear_attn.in_proj_b.weight": b,
        "linear_attn.in_proj_a.weight": np.zeros((nv, hidden)),
    }
    gate_rows = {  # every row, as for the MLP
        "linear_attn.in_proj_z.weight": np.arange(vd),
        "linear_attn.in_proj_b.weight": np.arange(nv),
    }
    return params, gate_rows


def _full_attention_params(rows: _Rows) -> tuple[dict, dict]:
    """Zero weights (the circuit uses no softmax attention) with the output gate muted."""
    g = rows.s.geometry
    q_out = g.attention_heads * g.head_dim * 2  # per head: query, then its output gate
    gate = [
        h * 2 * g.head_dim + g.head_dim + i
        for h in range(g.attention_heads)
        for i in range(g.head_dim)
    ]
    params = {
        "self_attn.q_proj.weight": np.zeros((q_out, g.hidden)),
        "self_attn.k_proj.weight": np.zeros((g.kv_heads * g.head_dim, g.hidden)),
        "self_attn.v_proj.weight": np.zeros((g.kv_heads * g.head_dim, g.hidden)),
        "self_attn.o_proj.weight": np.zeros((g.hidden, g.attention_heads * g.head_dim)),
        "self_attn.q_norm.weight": np.zeros(g.head_dim),
        "self_attn.k_norm.weight": np.zeros(g.head_dim),
    }
    return params, {"self_attn.q_proj.weight": np.array(gate, dtype=np.int64)}


def emit_layers(schedule: Schedule) -> list[EmittedLayer]:
    """The parameters of every circuit layer, not yet muted (see mute.mute_layers)."""
    rows = _Rows(schedule)
    g = schedule.geometry
    layers = []
    for plan in schedule.layers:
        params: dict[str, np.ndarray] = {}
        gate_rows: dict[str, np.ndarray] = {}
        if plan.kind == LINEAR:
            p, gr = _linear_attention_params(plan, rows)
            params.update(p)
            gate_rows.update(gr)
        elif plan.kind == FULL:
            p, gr = _full_attention_params(rows)
            params.update(p)
            gate_rows.update(gr)
        mlp, mlp_rows, count = _mlp_params(plan, rows, g.intermediate)
        params.update(mlp)
        gate_rows["mlp.gate_proj.weight"] = mlp_rows
        params["input_layernorm.weight"] = np.zeros(g.hidden)
        params["post_attention_layernorm.weight"] = np.zeros(g.hidden)
        for name, value in params.items():
            bad = [v for v in np.unique(value) if not is_bf16_exact(float(v))]
            if bad:
                raise CircuitError(
                    f"layer {plan.index} {name}: weights {bad[:3]} are not "
                    "exactly representable in bfloat16"
                )
        # bf16-exact values are float32-exact: half the memory of float64 (a 2B machine's
        # 23 layers take about 5 GB), and no value changes
        params = {name: value.astype(np.float32) for name, value in params.items()}
        layers.append(EmittedLayer(plan.index, plan.kind, params, gate_rows, count))
    return layers
