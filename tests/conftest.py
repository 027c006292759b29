"""Shared machine fixtures, for the machine's and the chat's launch tests: the machine
compiled once per test session for a geometry (the reduced preset on Qwen3.5-0.8B in the
default run, about 25 s; the full machine on
Qwen3.5-2B in the slow tier, about a minute), and one in-memory model at a time (a
2B-wide stack of 36 layers takes several GB), on the CPU or on $QWENGPU_TEST_DEVICE
(scripts/gpu_model_suite.sh runs the launch tests on a GPU)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys

import numpy as np
import pytest

from qwengpu.circuit import QWEN35_0_8B, QWEN35_2B
from qwengpu.circuit.mute import synthetic_embedding

TEXT_ROWS = 2048
DEVICE = os.environ.get("QWENGPU_TEST_DEVICE", "cpu")


def _text(hidden: int) -> np.ndarray:
    return synthetic_embedding(TEXT_ROWS, hidden, seed=7).float().numpy().astype(np.float64)


class Backends:
    """Builds the in-memory model for a dtype, keeping only the latest one (of every
    Backends) alive."""

    built: list[Backends] = []

    def __init__(self, geometry) -> None:
        from qwengpu.machine.model import compile_machine

        self.geometry = geometry
        self.text = _text(geometry.hidden)
        self.machine = compile_machine(geometry, embedding=self.text)
        self.dtype = None
        self.backend = None

    @property
    def spec(self):
        return self.machine.spec

    @property
    def device(self) -> str:
        return DEVICE

    def get(self, dtype_name: str):
        import torch

        from qwengpu.host.model_backend import ModelBackend
        from qwengpu.machine.model import build_launch_model

        if self.dtype != dtype_name:
            for other in list(Backends.built):
                other.release()
            Backends.built = [self]
            rng = np.random.default_rng(3)
            norm = rng.normal(0.0, 0.1, self.geometry.hidden)  # a base's final-norm weights
            model, offset = build_launch_model(
                self.machine,
                self.text,
                base_layers=4,
                dtype=getattr(torch, dtype_name),
                final_norm_weight=norm,
            )
            self.backend = ModelBackend(self.machine, model.to(DEVICE), offset)
            self.dtype = dtype_name
        return self.backend

    def release(self) -> None:
        self.backend, self.dtype = None, None
        if self in Backends.built:  # else the class list keeps it, compiled machine and all
            Backends.built.remove(self)
        _free_memory()


def _free_memory() -> None:
    """Free the released models (their modules hold cycles) and hand the freed heap back to
    the OS: glibc keeps it otherwise, and the slow tier's checkpoint tests launch in child
    processes that need the room (the 2B checkpoint's float32 launch peaked at 21.6 GB)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # glibc only
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@pytest.fixture(scope="session")
def reduced() -> Backends:
    """The reduced preset (2-lane warps) on the Qwen3.5-0.8B geometry."""
    return Backends(QWEN35_0_8B)


@pytest.fixture(scope="module")
def full() -> Backends:
    """The full machine on the Qwen3.5-2B geometry (slow tier; its ~8 GB of compiled layers
    live for one module)."""
    backends = Backends(QWEN35_2B)
    yield backends
    backends.release()


@pytest.fixture
def without_interpreter(monkeypatch):
    """A context in which the interpreter can be neither imported nor run: the model's
    results cannot come from it."""

    @contextlib.contextmanager
    def forbidden_interpreter():
        import qwengpu.interp.machine as interp

        def forbidden(*_a, **_k):
            raise AssertionError("the model backend called the interpreter")

        with monkeypatch.context() as patch:
            patch.setattr(interp, "run_program", forbidden)
            patch.setattr(interp.Interpreter, "step", forbidden)
            for name in [m for m in sys.modules if m.startswith("qwengpu.interp")]:
                patch.setitem(sys.modules, name, None)  # any import of it now fails
            yield

    return forbidden_interpreter
