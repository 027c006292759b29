"""qgpu build / drift argument handling (the commands themselves run in test_build.py)."""

from __future__ import annotations

import argparse
import importlib

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
    assert isinstance(circuit_compiler("passthrough"), PassthroughCircuit)
    with pytest.raises(ModelError, match="unknown circuit"):
        circuit_compiler("fpga")
    machine = importlib.import_module("qwengpu.machine")
    if hasattr(machine, "circuit_compiler"):
        pytest.skip("the real GPU circuit exists now")
    said = []
    assert isinstance(circuit_compiler("machine", said.append), PassthroughCircuit)
    assert "not available yet" in said[0]
