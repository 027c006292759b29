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


def _zero_inside(path, tensor_name):
    """Zero the middle bytes of one tensor of a safetensors file (its size unchanged): only
    a checksum can tell."""
    from qwengpu.model.safetensors_io import read_header

    tensors, _ = read_header(path)
    t = tensors[tensor_name]
    with path.open("r+b") as f:
        f.seek(t.start + t.nbytes // 4)
        f.write(bytes(t.nbytes // 2))


def _largest_tensor(path):
    from qwengpu.model.safetensors_io import read_header

    tensors, _ = read_header(path)
    return max(tensors.values(), key=lambda t: t.nbytes).name


def test_a_zeroed_tensor_is_named_by_verify_and_refused_at_first_load(checkpoint, qwengpu_cache):
    shard = checkpoint / "model.safetensors"
    name = _largest_tensor(shard)
    _zero_inside(shard, name)
    damaged = rf"model.safetensors does not match .*damaged: {name}"
    with pytest.raises(CheckpointError, match=damaged):
        verify_checkpoint(checkpoint, deep=True)
    with pytest.raises(CheckpointError, match=rf"damaged: {name}"):
        load_checkpoint(checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, dtype="float32")


def test_a_verified_checkpoint_is_not_hashed_again_until_a_file_changes(
    checkpoint, qwengpu_cache, monkeypatch, capsys
):
    """`qgpu verify` checks every file and remembers it; a load then checks sizes and small
    files only; a shard touched afterwards is hashed again on the next load. (The tiny
    shard counts as large here: the quick check's limit is set to 0.)"""
    import os

    import qwengpu.model.manifest as manifests
    from qwengpu.cli.main import main

    assert main(["verify", str(checkpoint)]) == 0
    assert "every checksum matches" in capsys.readouterr().out
    hashed = []
    real = manifests.file_sha256

    def counting(path, on_bytes=None):
        hashed.append(path.name)
        return real(path, on_bytes)

    monkeypatch.setattr(manifests, "file_sha256", counting)
    monkeypatch.setattr(manifests, "QUICK_HASH_LIMIT", 0)
    load_checkpoint(checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, dtype="float32")
    assert "model.safetensors" not in hashed
    shard = checkpoint / "model.safetensors"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    load_checkpoint(checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, dtype="float32")
    assert "model.safetensors" in hashed


def test_verify_reports_damage_in_one_line(checkpoint, qwengpu_cache, capsys):
    from qwengpu.cli.main import main

    shard = checkpoint / "model.safetensors"
    _zero_inside(shard, _largest_tensor(shard))
    assert main(["verify", str(checkpoint)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("qgpu: error: ") and "damaged: " in err and "Traceback" not in err


def test_a_manifest_missing_a_key_is_refused_clearly(checkpoint):
    import json

    path = checkpoint / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    del manifest["files"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"lacks 'files'; rebuild it with `qgpu build`"):
        verify_checkpoint(checkpoint)


def test_a_garbage_header_is_a_checkpoint_error_not_a_traceback(checkpoint, qwengpu_cache):
    """A shard whose header is garbage (its size kept): the checksum names the file and says
    the header is unreadable."""
    shard = checkpoint / "model.safetensors"
    with shard.open("r+b") as f:
        f.seek(8)
        f.write(b"\x00garbage" * 4)
    with pytest.raises(CheckpointError, match="does not match its checksum"):
        load_checkpoint(checkpoint, DEFAULT_SPEC, PASSTHROUGH_VERSION, dtype="float32")
