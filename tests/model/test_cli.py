"""qgpu build / drift argument handling (the commands themselves run in test_build.py)."""

from __future__ import annotations

import argparse

import pytest

from qwengpu.errors import ModelError
from qwengpu.model.cli import add_build_arguments, add_drift_arguments, circuit_compiler, parse_size
from qwengpu.model.passthrough import PassthroughCircuit


def test_parse_size():
    assert parse_size("2GB") == 2 << 30
    assert parse_size("500MB") == 500 << 20
    assert parse_size("1.5G") == 3 << 29
    assert parse_size("4096") == 4096
    with pytest.raises(ModelError, match="expected e.g. 2GB"):
        parse_size("lots")


def test_parsers():
    build = argparse.ArgumentParser()
    add_build_arguments(build)
    args = build.parse_args(["--out", "x"])
    assert (args.base, args.circuit, args.shard_size, args.overwrite) == (
        None,
        "machine",
        "2GB",
        False,
    )
    drift = argparse.ArgumentParser()
    add_drift_arguments(drift)
    assert drift.parse_args(["--model", "m"]).dtype == "both"


def test_circuits():
    from qwengpu.model.machine_circuit import MACHINE_COMPILER_VERSION, MachineCircuitCompiler

    assert isinstance(circuit_compiler("passthrough"), PassthroughCircuit)
    machine = circuit_compiler("machine")
    assert isinstance(machine, MachineCircuitCompiler)
    # no fixed spec: each base geometry gets its preset (machine.model.machine_spec_for)
    assert (machine.spec, machine.compiler_version) == (None, MACHINE_COMPILER_VERSION)
    with pytest.raises(ModelError, match="unknown circuit"):
        circuit_compiler("fpga")
