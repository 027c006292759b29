"""Shared fixtures: a persistent test cache, and the tiny synthetic checkpoints (built once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def qwengpu_cache():
    """Point qwengpu's cache at .pytest_cache/ (ignored by git, kept between runs): the
    tokenizer conversion and the synthetic bases are made once, not in every run."""
    old = os.environ.get("QWENGPU_CACHE")
    path = Path(os.environ.get("QWENGPU_TEST_CACHE", REPO / ".pytest_cache" / "qwengpu"))
    os.environ["QWENGPU_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("QWENGPU_CACHE", None)
    else:
        os.environ["QWENGPU_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_base(qwengpu_cache):
    """synthetic:tiny: image-text layout, tied embeddings (like the real Qwen3.5 bases)."""
    from qwengpu.model.base import resolve_base

    return resolve_base("synthetic:tiny")


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_base, tmp_path_factory):
    """The passthrough circuit merged into synthetic:tiny, built through `qgpu build`."""
    import argparse

    from qwengpu.model.cli import add_build_arguments, build_cli

    out = tmp_path_factory.mktemp("vlm") / "merged"
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    args = parser.parse_args(
        ["--base", "synthetic:tiny", "--out", str(out), "--circuit", "passthrough"]
    )
    assert build_cli(args) == 0
    return out


LIVE_BASE = "synthetic:tiny,text,untied"


@pytest.fixture(scope="session")
def live_text_build(qwengpu_cache):
    """The default checkpoint, built on first use from $QWENGPU_BASE: text-only layout,
    untied embeddings, and a circuit whose output projections are random, so that only
    the muting keeps text unchanged. Returns (path, progress messages)."""
    import shutil

    from qwengpu.model.defaults import default_checkpoint, ensure_checkpoint
    from qwengpu.model.passthrough import PassthroughCircuit

    compiler = PassthroughCircuit(live_outputs=True)
    old = os.environ.get("QWENGPU_BASE")
    os.environ["QWENGPU_BASE"] = LIVE_BASE
    try:
        shutil.rmtree(default_checkpoint(compiler), ignore_errors=True)  # really first use
        messages: list[str] = []
        path = ensure_checkpoint(compiler, progress=messages.append)
    finally:
        if old is None:
            os.environ.pop("QWENGPU_BASE", None)
        else:
            os.environ["QWENGPU_BASE"] = old
    return path, messages


@pytest.fixture(scope="session")
def live_text_checkpoint(live_text_build):
    return live_text_build[0]
