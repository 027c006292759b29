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
