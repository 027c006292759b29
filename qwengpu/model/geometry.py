"""Qwen3.5 geometries: the real models' shapes, and a tiny one for fast tests.

Figures from the published Qwen3.5 configs (Qwen/Qwen3.5-0.8B, -2B, -4B): every one is a
vision-language checkpoint with a 248,320-row tied embedding, 3 Gated DeltaNet layers per
full-attention layer, 128-dimensional DeltaNet heads, 256-dimensional attention heads with
partial (25%) interleaved multimodal RoPE.
"""

from __future__ import annotations

from typing import Any

from qwengpu.errors import ModelError

QWEN35_VOCAB_ROWS = 248320  # embedding rows (the tokenizer has 248,077; the rest is padding)
FULL_ATTENTION_INTERVAL = 4


def layer_types(num_layers: int, interval: int = FULL_ATTENTION_INTERVAL) -> list[str]:
    """Qwen3.5's pattern: every `interval`-th layer is full attention, the rest DeltaNet."""
    return [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention"
        for i in range(num_layers)
    ]


def _text(
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    k_heads: int,
    v_heads: int,
    *,
    head_dim: int = 256,
    linear_head_dim: int = 128,
    mrope_section: tuple[int, int, int] = (11, 11, 10),
) -> dict[str, Any]:
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": QWEN35_VOCAB_ROWS,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": linear_head_dim,
        "linear_value_head_dim": linear_head_dim,
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "layer_types": layer_types(layers),
        "tie_word_embeddings": True,
        "use_cache": True,
        "eos_token_id": 248044,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": list(mrope_section),
            "mrope_interleaved": True,
        },
    }


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
            64, 4, 2, 1, 128, 2, 4, head_dim=32, linear_head_dim=16, mrope_section=(2, 1, 1)
        ),
        "vision": _vision(1, 32, 64, 2, 64, 64),
    },
    "0.8b": {
        "text": _text(1024, 24, 8, 2, 3584, 16, 16),
        "vision": _vision(12, 768, 3072, 12, 1024, 2304),
    },
    "2b": {
        "text": _text(2048, 24, 8, 2, 6144, 16, 16),
        "vision": _vision(24, 1024, 4096, 16, 2048, 2304),
    },
    "4b": {
        "text": _text(2560, 32, 16, 4, 9216, 16, 32),
        "vision": _vision(24, 1024, 4096, 16, 2560, 2304),
    },
}


def geometry(name: str) -> dict[str, dict[str, Any]]:
    """Deep copy of a named geometry: {"text": text_config, "vision": vision_config}."""
    import copy

    if name not in GEOMETRIES:
        raise ModelError(f"unknown Qwen3.5 geometry '{name}' (known: {', '.join(GEOMETRIES)})")
    return copy.deepcopy(GEOMETRIES[name])
