"""Full HF configs for the synthetic bases: the circuit geometries plus what a checkpoint adds.

The decoder-layer shapes of the real models come from `qwengpu.circuit.geometry` (the one
source of truth); this module adds what only a whole checkpoint has: the layer count, the
vision tower, the tokenizer's special ids and the multimodal RoPE sections. Every
published Qwen3.5 is a vision-language checkpoint with a 248,320-row tied embedding, 3
Gated DeltaNet layers per full-attention layer, 128-dimensional DeltaNet heads and
256-dimensional attention heads with partial (25%) interleaved multimodal RoPE.

`tiny` is a toy for fast builder tests (hidden 64, DeltaNet heads of 16) with the real
vocabulary. It is not a circuit geometry: circuits need 128-dimensional DeltaNet heads,
and the circuit compiler's own `TINY` is another, larger shape.
"""

from __future__ import annotations

from typing import Any

from qwengpu.circuit.geometry import (
    FULL_ATTENTION_INTERVAL,
    PARTIAL_ROTARY_FACTOR,
    QWEN35_0_8B,
    QWEN35_2B,
    QWEN35_4B,
    QWEN35_VOCAB_ROWS,
    ROPE_THETA,
    Geometry,
    layer_types,
)
from qwengpu.errors import ModelError

EOS_TOKEN_ID = 248044
MAX_POSITIONS = 262144  # the published configs' context length


def _text(
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    k_heads: int,
    v_heads: int,
    *,
    head_dim: int,
    linear_head_dim: int,
    conv_kernel: int,
    rms_norm_eps: float,
    vocab_size: int = QWEN35_VOCAB_ROWS,
    interval: int = FULL_ATTENTION_INTERVAL,
    mrope_section: tuple[int, int, int] = (11, 11, 10),
) -> dict[str, Any]:
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": rms_norm_eps,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "linear_conv_kernel_dim": conv_kernel,
        "linear_key_head_dim": linear_head_dim,
        "linear_value_head_dim": linear_head_dim,
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "layer_types": layer_types(layers, interval),
        "tie_word_embeddings": True,
        "use_cache": True,
        "eos_token_id": EOS_TOKEN_ID,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": ROPE_THETA,
            "partial_rotary_factor": PARTIAL_ROTARY_FACTOR,
            "mrope_section": list(mrope_section),
            "mrope_interleaved": True,
        },
    }


def _text_of(g: Geometry, layers: int) -> dict[str, Any]:
    """The text config of a published model: `g`'s decoder-layer shapes, `layers` deep
    (circuit geometries have equal DeltaNet key and value head sizes, 128)."""
    return _text(
        g.hidden,
        layers,
        g.attention_heads,
        g.kv_heads,
        g.intermediate,
        g.linear_key_heads,
        g.linear_value_heads,
        head_dim=g.head_dim,
        linear_head_dim=g.linear_key_dim,
        conv_kernel=g.conv_kernel,
        rms_norm_eps=g.rms_norm_eps,
        vocab_size=g.vocab_size,
        interval=g.full_attention_interval,
    )


def _vision(depth: int, hidden: int, intermediate: int, heads: int, out: int, positions: int):
    return {
        "model_type": "qwen3_5_vision",
        "depth": depth,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_heads": heads,
        "out_hidden_size": out,
        "hidden_act": "gelu_pytorch_tanh",
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": positions,
        "initializer_range": 0.02,
    }


GEOMETRIES: dict[str, dict[str, dict[str, Any]]] = {
    # Fast tests: real vocabulary, toy widths (rotary dim 8 -> mrope sections sum to 4).
    "tiny": {
        "text": _text(
            64,
            4,
            2,
            1,
            128,
            2,
            4,
            head_dim=32,
            linear_head_dim=16,
            conv_kernel=QWEN35_2B.conv_kernel,
            rms_norm_eps=QWEN35_2B.rms_norm_eps,
            mrope_section=(2, 1, 1),
        ),
        "vision": _vision(1, 32, 64, 2, 64, 64),
    },
    "0.8b": {
        "text": _text_of(QWEN35_0_8B, 24),
        "vision": _vision(12, 768, 3072, 12, QWEN35_0_8B.hidden, 2304),
    },
    "2b": {
        "text": _text_of(QWEN35_2B, 24),
        "vision": _vision(24, 1024, 4096, 16, QWEN35_2B.hidden, 2304),
    },
    "4b": {
        "text": _text_of(QWEN35_4B, 32),
        "vision": _vision(24, 1024, 4096, 16, QWEN35_4B.hidden, 2304),
    },
}


def geometry(name: str) -> dict[str, dict[str, Any]]:
    """Deep copy of a named geometry: {"text": text_config, "vision": vision_config}."""
    import copy

    if name not in GEOMETRIES:
        raise ModelError(f"unknown Qwen3.5 geometry '{name}' (known: {', '.join(GEOMETRIES)})")
    return copy.deepcopy(GEOMETRIES[name])
