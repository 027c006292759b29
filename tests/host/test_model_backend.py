"""The model backend's host side that needs no model: choosing one, refusing bad input."""

from __future__ import annotations

import pytest

from qwengpu.errors import ArgError
from qwengpu.host.model_backend import MEMORY_MODELS, ModelBackend, default_backend


def test_in_memory_models_name_a_machine_geometry():
    assert MEMORY_MODELS["memory"] == "0.8b" and MEMORY_MODELS["memory:2b"] == "2b"
    with pytest.raises(ArgError, match="memory:7b: choose memory:0.8b or memory:2b"):
        default_backend("float32", "7b")
    with pytest.raises(ArgError, match="float16: the machine is exact in float32 and bf"):
        default_backend("float16")


def test_a_vocabulary_without_text_tokens_is_refused():
    with pytest.raises(ArgError, match="must start with text tokens"):
        ModelBackend(machine=None, model=None, token_offset=0)


def test_progress_off_a_terminal_is_one_line_per_report(capsys):
    from qwengpu.host.model_backend import end_progress, stderr_progress

    stderr_progress("CTA 1/1: 1/2 warps done; 16 EXEC steps, 43 tokens")
    stderr_progress("CTA 1/1: 2/2 warps done; 27 EXEC steps, 69 tokens")
    end_progress()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "CTA 1/1: 1/2 warps done; 16 EXEC steps, 43 tokens",
        "CTA 1/1: 2/2 warps done; 27 EXEC steps, 69 tokens",
    ]


def test_the_in_memory_model_goes_to_the_device_asked_for(monkeypatch):
    """`--model memory --device D` builds the model, then moves it to D (each dtype,
    geometry and device built once per process). The machine and model are stand-ins."""
    import types

    import torch

    import qwengpu.host.model_backend as backends
    import qwengpu.machine.model as machine_model

    built = []

    def build(machine, text, base_layers, dtype):
        built.append(dtype)
        return torch.nn.Linear(2, 2).to(dtype), 1

    machine = types.SimpleNamespace(vocab=None)
    monkeypatch.setattr(machine_model, "compile_machine", lambda *a, **k: machine)
    monkeypatch.setattr(machine_model, "build_launch_model", build)
    monkeypatch.setattr(backends, "_backends", {})
    monkeypatch.setattr(backends, "_machines", {})
    monkeypatch.setattr(backends, "pick_device", lambda name: name)  # meta: no user device
    backend = default_backend("bfloat16", "0.8b", "meta")
    assert backend.model.weight.device.type == "meta" and backend.machine is machine
    assert default_backend("bfloat16", "0.8b", "meta") is backend and built == [torch.bfloat16]


def test_an_absent_device_is_refused_before_anything_loads(monkeypatch):
    """`--device cuda|mps` where there is none: one line, before any model is built."""
    import torch

    import qwengpu.host.model_backend as backends

    def no_build(*args, **kwargs):
        raise AssertionError("nothing may be built for an absent device")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(backends, "default_backend", no_build)
    monkeypatch.setattr(backends, "checkpoint_backend", no_build)
    for device, message in [
        ("cuda", "--device cuda: .*; use --device cpu"),
        ("cuda:1", "--device cuda:1: .*; use --device cpu"),
        ("mps", "--device mps: no Apple GPU"),
        ("tpu", "--device tpu: choose cuda, cuda:N, mps or cpu"),
    ]:
        with pytest.raises(ArgError, match=message):
            backends.model_backend("memory", device=device)
        with pytest.raises(ArgError, match=message):
            backends.model_backend("/no/such/checkpoint", device=device)
    assert backends.pick_device(None) == "cpu" and backends.pick_device("cpu") == "cpu"


def test_prefill_groups_bound_the_padding():
    """Longest first; a prompt joins a group while it is at least PREFILL_FILL of the
    group's longest, so no group is more than a quarter padding."""
    from qwengpu.host.model_backend import PREFILL_FILL, prefill_groups

    lengths = [100, 558, 420, 419, 90, 300, 558]
    groups = prefill_groups(lengths)
    assert groups == [[1, 6, 2, 3], [5], [0, 4]]
    for group in groups:
        assert min(lengths[b] for b in group) >= PREFILL_FILL * lengths[group[0]]
    assert prefill_groups([]) == [] and prefill_groups([5]) == [[0]]
