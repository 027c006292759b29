"""The streaming safetensors writer and reader, checked against the safetensors library."""

from __future__ import annotations

import json

import pytest
import torch

from qwengpu.errors import CheckpointError
from qwengpu.model.safetensors_io import (
    TensorSource,
    dtype_name,
    load_tensor,
    plan_shards,
    read_checkpoint_tensors,
    read_header,
    tensor_bytes,
    write_sharded,
)


def _sources(tensors):
    return [
        TensorSource(name, dtype_name(t.dtype), tuple(t.shape), lambda t=t: [tensor_bytes(t)])
        for name, t in tensors.items()
    ]


def test_sharded_round_trip(tmp_path):
    from safetensors.torch import load_file

    gen = torch.Generator().manual_seed(0)
    tensors = {
        "a.weight": torch.randn(7, 5, generator=gen).to(torch.bfloat16),
        "b.weight": torch.randn(300, generator=gen),
        "c.scalar": torch.tensor(3.0),
        "d.big": torch.randn(64, 64, generator=gen).to(torch.bfloat16),
    }
    hashes = write_sharded(tmp_path, _sources(tensors), max_shard_bytes=2000)
    assert len(hashes) > 1
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    loaded = {}
    for name in hashes:
        loaded |= load_file(tmp_path / name)
    assert set(index["weight_map"]) == set(tensors) == set(loaded)
    for name, t in tensors.items():
        assert torch.equal(loaded[name], t)
    stored = read_checkpoint_tensors(tmp_path)
    assert torch.equal(load_tensor(stored["d.big"]), tensors["d.big"])
    assert (
        b"".join(stored["a.weight"].chunks(10, 20))
        == bytes(tensor_bytes(tensors["a.weight"]))[10:20]
    )


def test_single_file_and_planning(tmp_path):
    tensors = {"x": torch.zeros(4), "y": torch.ones(2, 2)}
    assert list(write_sharded(tmp_path, _sources(tensors), 1 << 20)) == ["model.safetensors"]
    assert not (tmp_path / "model.safetensors.index.json").exists()
    sizes = [len(s) for s in plan_shards(_sources({"p": torch.zeros(100), "q": torch.zeros(1)}), 8)]
    assert sizes == [1, 1]  # a tensor bigger than a shard gets a shard to itself


def test_corrupt_header_is_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        read_header(path)
    path.write_bytes(b"\xff" * 16)
    with pytest.raises(CheckpointError, match="not a safetensors"):
        read_header(path)
