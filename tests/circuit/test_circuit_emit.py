"""Emission: every parameter of real Qwen3_5DecoderLayer modules, for every geometry."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer

from qwengpu.circuit import (
    GEOMETRIES,
    QWEN35_2B,
    Bit,
    Bits,
    Circuit,
    Column,
    compile_circuit,
)
from qwengpu.circuit.numerics import A_LOG_NO_DECAY, is_bf16_exact
from qwengpu.isa.instr import Cond


def sample_circuit() -> Circuit:
    """A memory, a read, an adder and a compare: every kind of parameter gets used."""
    c = Circuit("sample")
    a = c.input("a", Bits(32))
    b = c.input("b", Bits(32))
    we = c.input("we", Bit())
    addr = c.input("addr", Bits(4))
    mem = c.memory("m", 16, [Column("v", Bits(32))])
    c.write(mem, addr, [a], when=we)
    r = c.read(mem, addr, valid=True)
    c.output(c.add(r.outputs[0], b), r.valid, c.compare(a, b, Cond.LT))
    return c


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_state_dicts_fit_every_geometry(name):
    g = GEOMETRIES[name]
    compiled = compile_circuit(sample_circuit(), g)
    config = g.text_config(compiled.layer_types)
    with torch.device("meta"):
        modules = [Qwen3_5DecoderLayer(config, i) for i in range(compiled.num_layers)]
    for layer, module in zip(compiled.layers, modules, strict=True):
        expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
        got = {k: tuple(v.shape) for k, v in layer.params.items()}
        assert got == expected, f"{name} layer {layer.index}"
        for key, value in layer.params.items():
            assert all(is_bf16_exact(float(v)) for v in np.unique(value)), key


def test_layer_conventions():
    compiled = compile_circuit(sample_circuit(), GEOMETRIES["tiny"])
    for layer in compiled.layers:
        p = layer.params
        assert not p["input_layernorm.weight"].any()  # Qwen3.5 scale 1 + 0
        assert not p["post_attention_layernorm.weight"].any()
        if layer.kind == "linear_attention":
            assert (p["linear_attn.A_log"] == A_LOG_NO_DECAY).all()
            assert (
                not p["linear_attn.dt_bias"].any() and not p["linear_attn.in_proj_a.weight"].any()
            )
            conv = p["linear_attn.conv1d.weight"]
            assert (conv[..., -1] == 1).all() and not conv[..., :-1].any()  # current token only
            assert (p["linear_attn.norm.weight"] == 1).all()
        else:
            for key in ("q_proj", "k_proj", "v_proj", "o_proj"):
                assert not p[f"self_attn.{key}.weight"].any()  # attention adds exactly 0
    assert compiled.layers[3].kind == "full_attention"


def test_decoder_layers_load_strictly():
    compiled = compile_circuit(sample_circuit(), GEOMETRIES["tiny"])
    for dtype in (torch.float32, torch.bfloat16):
        layers = compiled.decoder_layers(dtype)
        assert len(layers) == compiled.num_layers
        assert all(p.dtype == dtype for layer in layers for p in layer.parameters())


@pytest.mark.slow
def test_real_2b_layers_run_exactly():
    """Real 2B-geometry decoder layers (about 60M parameters each) in a whole model."""
    from qwengpu.circuit.runtime import CircuitModel

    compiled = compile_circuit(sample_circuit(), QWEN35_2B, pad_to_pattern=False)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, (2, 12))
    b = rng.integers(0, 2**32, (2, 12))
    embeds = compiled.embed(
        {"a": a, "b": b, "we": np.ones((2, 12), int), "addr": np.arange(24).reshape(2, 12) % 16}
    )
    out = compiled.circuit.outputs[0]
    for dtype in (torch.float32, torch.bfloat16):
        model = CircuitModel(compiled, dtype)
        for mode in ("prefill", "decode"):
            residual = model.run(embeds=embeds, mode=mode)
            assert np.array_equal(compiled.decode(residual, out)[..., 0], (a + b) % 2**32)
            compiled.check_residual(residual)
