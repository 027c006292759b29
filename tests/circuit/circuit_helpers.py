"""Shared helpers for the circuit tests: run compiled circuits through real HF models."""

from __future__ import annotations

import numpy as np
import torch

from qwengpu.circuit import TINY, CompiledCircuit, Field, Geometry
from qwengpu.circuit.runtime import CircuitModel

DTYPES = (torch.float32, torch.bfloat16)
PATHS = ("prefill", "decode")  # chunked kernel / recurrent kernel with a cache

TINY1 = TINY.with_layers(name="tiny-1head", linear_key_heads=1, linear_value_heads=1)
"""TINY with a single DeltaNet head: the CPU reference kernels (depthwise conv1d in bf16
runs one channel at a time) cost in proportion to the heads, and MLP-only circuits need
none."""

TINY2 = TINY.with_layers(name="tiny-2head", linear_key_heads=2, linear_value_heads=2)
"""TINY with two DeltaNet heads, for memory tests."""

MEMWIDE = Geometry(
    name="test-memwide",
    hidden=768,
    intermediate=1024,
    linear_key_heads=2,
    linear_value_heads=2,
    attention_heads=2,
    kv_heads=1,
    head_dim=64,
    vocab_size=64,
)
"""Room for a memory row wider than one head (two value heads per copy)."""

ODD = Geometry(
    name="test-odd",
    hidden=640,
    intermediate=1024,
    linear_key_heads=2,
    linear_value_heads=4,
    attention_heads=2,
    kv_heads=1,
    head_dim=64,
    vocab_size=64,
)
"""Like Qwen3.5-4B in the two ways that matter: a hidden size that is not a power of two
(640 = 10 x 4^3: ten anchor channels, as 2560 = 10 x 4^4) and two value heads per key head
(grouped value attention)."""

WIDE = Geometry(
    name="test-wide",
    hidden=768,
    intermediate=2560,
    linear_key_heads=1,
    linear_value_heads=1,
    attention_heads=2,
    kv_heads=1,
    head_dim=64,
    vocab_size=64,
)
"""Wide enough for 4-lane 32-bit adders and low multipliers, with a single DeltaNet head to
keep the CPU reference kernels cheap."""

WIDER = Geometry(
    name="test-wider",
    hidden=1280,
    intermediate=4608,
    linear_key_heads=1,
    linear_value_heads=1,
    attention_heads=2,
    kv_heads=1,
    head_dim=64,
    vocab_size=64,
)
"""For 4-lane high multipliers (the full 64-bit partial product array)."""

_models: dict[tuple[int, torch.dtype], CircuitModel] = {}


def model_for(compiled: CompiledCircuit, dtype: torch.dtype) -> CircuitModel:
    key = (id(compiled), dtype)
    if key not in _models:
        if len(_models) > 6:
            _models.clear()
        _models[key] = CircuitModel(compiled, dtype)
    return _models[key]


def run_paths(
    compiled: CompiledCircuit,
    embeds: np.ndarray,
    expect: dict[Field, np.ndarray],
    dtypes=DTYPES,
    paths=PATHS,
    clean: bool = True,
) -> None:
    """Run `embeds` [batch, tokens, hidden] through every dtype and path and assert that
    every expected field decodes exactly and (with `clean`) the whole residual is exact."""
    for dtype in dtypes:
        model = model_for(compiled, dtype)
        for path in paths:
            residual = model.run(embeds=embeds, mode=path)
            for f, want in expect.items():
                got = compiled.decode(residual, f)
                want = np.asarray(want).reshape(got.shape)
                bad = np.argwhere(got != want)
                assert len(bad) == 0, (
                    f"{f.name} wrong in {dtype} {path}: {len(bad)} of {got.size}, first at "
                    f"{bad[0].tolist()}: got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}"
                )
            if clean:
                compiled.check_residual(residual)
