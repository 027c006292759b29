"""A do-nothing circuit that is muted the honest way: the stand-in for the real GPU.

Every gate (MLP gate, DeltaNet z and beta, the attention output gate) is m * w_mute, with
w_mute the base's muting direction on all channels but a few reserved for the circuit
tokens. So on text every silu/sigmoid is exactly 0 and the layers add exactly 0, and the
builder's muting proof has real work to do. By default the output projections are zero as
well (text then stays bit-identical even if muting failed); `live_outputs=True` fills them
with random weights, so that only the muting keeps text unchanged.

The circuit tokens are 0 on the muting channels, so on them every gate is exactly 0: they
pass through too (their embedding rows are small, so on text they rarely win a logit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qwengpu.isa.spec import DEFAULT_SPEC, MachineSpec
from qwengpu.model.circuit_layers import BaseInfo, CircuitLayer, CircuitLayers
from qwengpu.model.muting import DEFAULT_MUTE_SCALE

PASSTHROUGH_VERSION = "passthrough-1"
DEFAULT_TOKENS = ("<|qgpu:start|>", "<|qgpu:nop|>", "<|qgpu:end|>")
RESERVED_CHANNELS = 4  # the circuit tokens live here; the muting direction uses the rest


@dataclass
class PassthroughCircuit:
    """CircuitCompiler that builds `layer_types` muted do-nothing layers."""

    layer_types: tuple[str, ...] = (
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
    )
    tokens: tuple[str, ...] = DEFAULT_TOKENS
    spec: MachineSpec = field(default_factory=lambda: DEFAULT_SPEC)
    compiler_version: str = PASSTHROUGH_VERSION
    mute_scale: float = DEFAULT_MUTE_SCALE
    live_outputs: bool = False
    seed: int = 0

    def __call__(self, base: BaseInfo) -> CircuitLayers:
        import torch

        hidden = base.hidden_size
        reserved = min(RESERVED_CHANNELS, hidden // 8)
        direction = base.mute_direction(channels=range(reserved, hidden))
        gate_row = direction.gate_row(self.mute_scale)

        rows = torch.zeros(len(self.tokens), hidden)
        for k in range(len(self.tokens)):
            rows[k, k % reserved] = 0.015625  # 2^-6: small, exact, 0 on every mute channel
        gen = torch.Generator().manual_seed(self.seed)
        config = dict(base.text_config)

        def layer(layer_type: str):
            return lambda: _layer_weights(layer_type, config, gate_row, self.live_outputs, gen)

        layers = [CircuitLayer(t, layer(t)) for t in self.layer_types]
        what = "muted no-op ({} outputs)".format("random" if self.live_outputs else "zero")
        return CircuitLayers(
            layers=layers,
            token_strings=list(self.tokens),
            input_rows=rows,
            output_rows=None,
            mute_direction=direction.vector,
            spec=self.spec,
            compiler_version=self.compiler_version,
            layer_map=[f"{t}: {what}" for t in self.layer_types],
            extra={
                "circuit": "passthrough",
                "mute_scale": self.mute_scale,
                "mute_margin": direction.margin,
                "mute_channels": f"{reserved}..{hidden - 1}",
                "live_outputs": self.live_outputs,
            },
        )


def _layer_weights(layer_type, config, gate_row, live_outputs, gen):
    import torch

    hidden = int(config["hidden_size"])
    inner = int(config["intermediate_size"])

    def out(rows: int, cols: int):
        if live_outputs:
            return (0.02 * torch.randn(rows, cols, generator=gen)).to(torch.bfloat16).float()
        return torch.zeros(rows, cols)

    def muted(rows: int):
        return gate_row.expand(rows, hidden).clone()

    weights = {
        "input_layernorm.weight": torch.zeros(hidden),
        "post_attention_layernorm.weight": torch.zeros(hidden),
        "mlp.gate_proj.weight": muted(inner),
        "mlp.up_proj.weight": out(inner, hidden),
        "mlp.down_proj.weight": out(hidden, inner),
    }
    if layer_type == "linear_attention":
        k_heads = int(config["linear_num_key_heads"])
        v_heads = int(config["linear_num_value_heads"])
        k_dim, v_dim = int(config["linear_key_head_dim"]), int(config["linear_value_head_dim"])
        conv_dim = 2 * k_heads * k_dim + v_heads * v_dim
        taps = int(config.get("linear_conv_kernel_dim", 4))
        conv = torch.zeros(conv_dim, 1, taps)
        conv[:, 0, -1] = 1.0  # current token only
        weights |= {
            "linear_attn.in_proj_qkv.weight": out(conv_dim, hidden),
            "linear_attn.in_proj_z.weight": muted(v_heads * v_dim),
            "linear_attn.in_proj_b.weight": muted(v_heads),
            "linear_attn.in_proj_a.weight": torch.zeros(v_heads, hidden),
            "linear_attn.dt_bias": torch.ones(v_heads),
            "linear_attn.A_log": torch.full((v_heads,), -16384.0),  # exp -> 0: no decay
            "linear_attn.conv1d.weight": conv,
            "linear_attn.norm.weight": torch.ones(v_dim),
            "linear_attn.out_proj.weight": out(hidden, v_heads * v_dim),
        }
    else:
        heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
        head_dim = int(config["head_dim"])
        q = torch.zeros(heads, 2 * head_dim, hidden)
        q[:, :head_dim] = out(heads * head_dim, hidden).reshape(heads, head_dim, hidden)
        q[:, head_dim:] = gate_row  # the output gate: sigmoid(...) = 0 on text
        weights |= {
            "self_attn.q_proj.weight": q.reshape(heads * 2 * head_dim, hidden),
            "self_attn.k_proj.weight": out(kv_heads * head_dim, hidden),
            "self_attn.v_proj.weight": out(kv_heads * head_dim, hidden),
            "self_attn.o_proj.weight": out(hidden, heads * head_dim),
            "self_attn.q_norm.weight": torch.zeros(head_dim),
            "self_attn.k_norm.weight": torch.zeros(head_dim),
        }
    return weights
