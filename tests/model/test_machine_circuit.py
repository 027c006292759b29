"""The machine as a circuit compiler (`qgpu build --circuit machine`): the parts that need
no full-size build. The 2B build itself, loaded in a fresh process and running a launch,
is in test_machine_checkpoint.py (slow tier)."""

from __future__ import annotations

import json
import shutil

import pytest

from qwengpu.circuit import GEOMETRIES, QWEN35_2B
from qwengpu.errors import CheckpointError, ModelError
from qwengpu.machine.tokens import Vocabulary
from qwengpu.model.machine_circuit import (
    MachineCircuitCompiler,
    base_geometry,
    geometry_from_record,
    geometry_record,
    token_string,
)


@pytest.mark.parametrize("name", ["0.8b", "2b", "4b"])
def test_base_geometry_names_the_preset(name):
    from qwengpu.model.geometry import geometry

    preset = GEOMETRIES[f"qwen3.5-{name}"]
    config = geometry(name)["text"] | {"vocab_size": 248500}
    geometry = base_geometry(config)
    assert geometry.name == preset.name
    assert geometry.hidden == preset.hidden and geometry.vocab_size == 248500
    assert geometry_from_record(json.loads(json.dumps(geometry_record(geometry)))) == geometry


def test_base_geometry_refuses_a_config_without_qwen35_fields():
    with pytest.raises(ModelError, match="lacks a Qwen3.5 field"):
        base_geometry({"hidden_size": 2048})


def test_token_strings_are_unique_and_special():
    from qwengpu.machine.model import MACHINE_SPEC

    strings = [token_string(t) for t in Vocabulary(MACHINE_SPEC).tokens]
    assert len(set(strings)) == len(strings)
    assert strings[0] == "<|qgpu:EXEC(b=0,w=0,mask=1)|>"
    assert all(s.startswith("<|qgpu:") and s.endswith(")|>") for s in strings)


def test_checkpoint_backend_refuses_a_checkpoint_without_the_machine(tiny_checkpoint):
    from qwengpu.host.model_backend import checkpoint_backend

    with pytest.raises(CheckpointError, match="holds no qgpu machine"):
        checkpoint_backend(tiny_checkpoint)


def test_checkpoint_backend_refuses_a_mismatched_compiler(tiny_checkpoint, tmp_path):
    from qwengpu.host.model_backend import checkpoint_backend
    from qwengpu.model.manifest import MANIFEST_NAME

    copy = tmp_path / "claims-machine"
    shutil.copytree(tiny_checkpoint, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    manifest["circuit"]["extra"] = {"circuit": "machine", "geometry": geometry_record(QWEN35_2B)}
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="different machine|circuit compiler"):
        checkpoint_backend(copy)


def test_compiler_is_registered_for_qgpu_build():
    from qwengpu.model.cli import circuit_compiler

    assert isinstance(circuit_compiler("machine"), MachineCircuitCompiler)


def test_a_base_too_small_for_the_machine_is_refused_clearly(tiny_base, tmp_path):
    from qwengpu.model.merge import build_checkpoint

    out = tmp_path / "merged"
    with pytest.raises(ModelError, match=r"cannot host the qgpu machine: .* 128-dim heads"):
        build_checkpoint("synthetic:tiny", out, MachineCircuitCompiler())
    assert not out.exists() and not list(tmp_path.iterdir())  # nothing half-written
