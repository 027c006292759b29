"""--base resolution: synthetic specs, local directories, the hub cache and offline mode."""

from __future__ import annotations

import json
import shutil

import pytest

from qwengpu.errors import ModelError
from qwengpu.model.base import BaseCheckpoint, resolve_base
from qwengpu.model.geometry import GEOMETRIES, geometry
from qwengpu.model.synthetic import SyntheticSpec


def test_synthetic_specs():
    assert SyntheticSpec.parse("synthetic:2b") == SyntheticSpec("2b")
    spec = SyntheticSpec.parse("synthetic:tiny,text,untied,seed=3")
    assert (spec.layout, spec.tied, spec.seed) == ("text", False, 3)
    with pytest.raises(ModelError, match="unknown synthetic geometry 'huge'"):
        SyntheticSpec.parse("synthetic:huge")
    with pytest.raises(ModelError, match="unknown synthetic option 'blue'"):
        SyntheticSpec.parse("synthetic:tiny,blue")


def test_real_geometries():
    two = geometry("2b")["text"]
    assert (two["hidden_size"], two["num_hidden_layers"], two["intermediate_size"]) == (
        2048,
        24,
        6144,
    )
    assert (two["linear_num_key_heads"], two["linear_num_value_heads"]) == (16, 16)
    assert two["layer_types"][:4] == ["linear_attention"] * 3 + ["full_attention"]
    assert geometry("0.8b")["text"]["hidden_size"] == 1024
    assert geometry("4b")["text"]["linear_num_value_heads"] == 32
    assert all(g["text"]["vocab_size"] == 248320 for g in GEOMETRIES.values())


def test_real_geometries_are_the_circuit_geometries():
    """The synthetic bases' configs are derived from qwengpu.circuit.geometry, which holds
    the published shapes once."""
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    from qwengpu.circuit.geometry import QWEN35_0_8B, QWEN35_2B, QWEN35_4B, geometry_from_config

    for name, circuit in (("0.8b", QWEN35_0_8B), ("2b", QWEN35_2B), ("4b", QWEN35_4B)):
        text = {k: v for k, v in geometry(name)["text"].items() if k != "model_type"}
        assert geometry_from_config(Qwen3_5TextConfig(**text), circuit.name) == circuit


def test_the_tiny_base_is_a_real_hf_checkpoint(tiny_base):
    assert tiny_base.layout == "vlm" and tiny_base.tied
    assert tiny_base.prefix == "model.language_model."
    assert tiny_base.vocab_rows == 248320 and tiny_base.first_free_id == 248077
    assert tiny_base.layer_of("model.language_model.layers.3.mlp.up_proj.weight") == (
        3,
        "mlp.up_proj.weight",
    )
    assert tiny_base.layer_of("model.visual.blocks.0.attn.qkv.weight") is None
    assert any(name.startswith("model.visual.") for name in tiny_base.tensors)
    assert "synthetic:tiny" in tiny_base.describe()


def test_a_local_directory_is_a_base(tiny_base):
    again = resolve_base(str(tiny_base.directory))
    assert again.directory == tiny_base.directory and again.revision is None


def _fake_hub_cache(root, repo, source):
    revision = "0123456789abcdef0123456789abcdef01234567"
    folder = root / f"models--{repo.replace('/', '--')}"
    shutil.copytree(source, folder / "snapshots" / revision)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(revision)
    return revision


def test_a_hub_base_comes_from_the_cache_offline(tiny_base, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    revision = _fake_hub_cache(tmp_path / "hub", "Qwen/Qwen3.5-Tiny", tiny_base.directory)
    messages = []
    base = resolve_base("Qwen/Qwen3.5-Tiny", progress=messages.append)
    assert base.revision == revision and base.source == "Qwen/Qwen3.5-Tiny"
    assert base.num_layers == 4 and "using the cached" in messages[0]


def test_offline_without_a_cached_copy_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"not in the Hugging Face cache .*offline"):
        resolve_base("Qwen/Qwen3.5-2B")


def test_an_unreachable_hub_says_how_to_build_offline(tmp_path, monkeypatch):
    """No network (and not HF_HUB_OFFLINE): one line that names the offline ways."""
    import huggingface_hub

    def unreachable(*args, **kwargs):
        raise ConnectionError("Max retries exceeded\n[Errno -2] Name or service not known")

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    with pytest.raises(ModelError) as caught:
        resolve_base("Qwen/Qwen3.5-2B")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("cannot reach the Hugging Face Hub")
    assert "--model memory" in message and "QWENGPU_BASE=synthetic:2b" in message


def test_unusable_bases_are_refused(tmp_path):
    import torch
    from safetensors.torch import save_file

    with pytest.raises(ModelError, match="not a directory, not a hub id"):
        resolve_base("no such thing at all")
    with pytest.raises(ModelError, match="no config.json"):
        BaseCheckpoint(tmp_path, "empty")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelError, match="not a dense Qwen3.5"):
        BaseCheckpoint(tmp_path, "llama")
    config = dict(geometry("tiny")["text"], tie_word_embeddings=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(
        {"model.embed_tokens.weight": torch.zeros(8, 64, dtype=torch.float16)},
        tmp_path / "model.safetensors",
    )
    with pytest.raises(ModelError, match="float16"):
        BaseCheckpoint(tmp_path, "fp16")
