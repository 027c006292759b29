"""The runtime's checks: mismatched, corrupt or foreign checkpoints are refused clearly."""

from __future__ import annotations

import shutil

import pytest

from qwengpu.errors import CheckpointError
from qwengpu.isa.spec import DEFAULT_SPEC, MachineSpec
from qwengpu.model.manifest import MANIFEST_NAME, load_checkpoint, verify_checkpoint
from qwengpu.model.passthrough import PASSTHROUGH_VERSION


@pytest.fixture
def checkpoint(tiny_checkpoint, tmp_path):
    """A private copy to damage."""
    return shutil.copytree(tiny_checkpoint, tmp_path / "ckpt")


def test_a_sound_checkpoint_verifies(checkpoint):
    manifest = verify_checkpoint(checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, deep=True)
    assert manifest["compiler_version"] == PASSTHROUGH_VERSION


def test_another_machine_spec_is_refused(checkpoint):
    with pytest.raises(CheckpointError, match="built for a different machine.*Rebuild"):
        verify_checkpoint(checkpoint, MachineSpec(lanes=8))


def test_another_compiler_version_is_refused(checkpoint):
    with pytest.raises(CheckpointError, match="circuit compiler 'passthrough-1'.*'machine-9'"):
        verify_checkpoint(checkpoint, DEFAULT_SPEC, "machine-9")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / MANIFEST_NAME).unlink(), "not a qwengpu checkpoint"),
        (lambda d: (d / MANIFEST_NAME).write_text("{ broken"), "corrupt"),
        (lambda d: (d / "tokenizer.json").unlink(), "incomplete: tokenizer.json is missing"),
        (lambda d: _truncate(d / "model.safetensors"), "model.safetensors has .* bytes"),
        (lambda d: _flip_byte(d / "model.safetensors"), "does not match its checksum"),
        (lambda d: _edit_config(d), "config.json does not match its checksum"),
    ],
    ids=["no-manifest", "bad-manifest", "missing-file", "truncated", "bit-flip", "edited"],
)
def test_damage_is_refused(checkpoint, damage, message):
    damage(checkpoint)
    with pytest.raises(CheckpointError, match=message):
        verify_checkpoint(checkpoint, deep=True)


def _truncate(path):
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - 1)


def _flip_byte(path):
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))


def _edit_config(directory):
    """Same size, one character of a layer type changed: only the checksum can tell."""
    path = directory / "config.json"
    text = path.read_text()
    path.write_text(text.replace('"full_attention"', '"full_attentiom"', 1))


def test_a_directory_that_is_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        verify_checkpoint(tmp_path / "nowhere")


def test_load_refuses_float16_and_a_missing_vision_tower(checkpoint, live_text_checkpoint):
    with pytest.raises(CheckpointError, match="float16 is not supported|float16"):
        load_checkpoint(checkpoint, dtype="float16")
    with pytest.raises(CheckpointError, match="no vision tower"):
        load_checkpoint(live_text_checkpoint, vision=True)


def test_load_verifies_then_loads(checkpoint):
    import torch

    model, tokenizer, manifest = load_checkpoint(
        checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, dtype="float32"
    )
    assert model.config.num_hidden_layers == 8 and manifest["base"]["layout"] == "vlm"
    ids = tokenizer("<|qgpu:start|>", add_special_tokens=False)["input_ids"]
    assert ids == [248077]
    assert torch.isfinite(model(torch.tensor([ids])).logits).all()
