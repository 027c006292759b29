"""The model backend's default checkpoint: resolved in the user cache, built on first use."""

from __future__ import annotations

import shutil

import pytest

from qwengpu.isa.spec import MachineSpec
from qwengpu.model import defaults
from qwengpu.model.defaults import default_base, default_checkpoint, ensure_checkpoint
from qwengpu.model.manifest import MANIFEST_NAME, verify_checkpoint
from qwengpu.model.passthrough import PassthroughCircuit

LIVE_BASE = "synthetic:tiny,text,untied"  # as in conftest.py


def test_default_base(monkeypatch):
    monkeypatch.delenv("QWENGPU_BASE", raising=False)
    assert default_base() == "Qwen/Qwen3.5-2B"
    monkeypatch.setenv("QWENGPU_BASE", "synthetic:0.8b")
    assert default_base() == "synthetic:0.8b"


def test_each_base_machine_and_compiler_has_its_own_checkpoint(qwengpu_cache):
    plain = PassthroughCircuit()
    paths = {
        default_checkpoint(plain, "Qwen/Qwen3.5-2B"),
        default_checkpoint(plain, "Qwen/Qwen3.5-0.8B"),
        default_checkpoint(PassthroughCircuit(compiler_version="v2"), "Qwen/Qwen3.5-2B"),
        default_checkpoint(PassthroughCircuit(spec=MachineSpec(lanes=8)), "Qwen/Qwen3.5-2B"),
    }
    assert len(paths) == 4
    assert all(p.parent == qwengpu_cache / "checkpoints" for p in paths)
    assert default_checkpoint(plain, "Qwen/Qwen3.5-2B").name.startswith("Qwen-Qwen3.5-2B--")


def test_first_use_builds_it_and_says_so(live_text_build):
    path, messages = live_text_build
    said = "\n".join(messages)
    assert f"no model checkpoint yet: building one from {LIVE_BASE}" in said
    assert "synthetic base, nothing to download" in said
    compiler = PassthroughCircuit(live_outputs=True)
    assert path == default_checkpoint(compiler, LIVE_BASE)
    verify_checkpoint(path, compiler.spec, compiler.compiler_version)


def test_later_uses_reuse_it(live_text_build, monkeypatch):
    path, _ = live_text_build

    def no_build(*args, **kwargs):
        raise AssertionError("must not rebuild a sound checkpoint")

    monkeypatch.setattr("qwengpu.model.merge.build_checkpoint", no_build)
    messages = []
    got = ensure_checkpoint(
        PassthroughCircuit(live_outputs=True), LIVE_BASE, progress=messages.append
    )
    assert got == path and messages == []


def test_an_unusable_one_is_rebuilt(live_text_build, monkeypatch, tmp_path):
    good, _ = live_text_build
    monkeypatch.setenv("QWENGPU_CACHE", str(tmp_path))
    compiler = PassthroughCircuit(live_outputs=True)
    target = default_checkpoint(compiler, LIVE_BASE)
    shutil.copytree(good, target)
    (target / MANIFEST_NAME).write_text("{}")
    calls = []

    def fake_build(base, out, compiler, *, overwrite, progress):
        calls.append((base, overwrite))
        shutil.rmtree(out)
        shutil.copytree(good, out)

    monkeypatch.setattr("qwengpu.model.merge.build_checkpoint", fake_build)
    messages = []
    assert ensure_checkpoint(compiler, LIVE_BASE, progress=messages.append) == target
    assert calls == [(LIVE_BASE, True)]
    assert "unusable" in messages[0] and "rebuilding" in messages[0]
    verify_checkpoint(target)


@pytest.mark.parametrize(
    ("base", "note"),
    [
        ("synthetic:2b", "nothing to download"),
        ("Qwen/Qwen3.5-2B", "offline"),
    ],
)
def test_download_note(base, note, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert note in defaults._download_note(base)
