"""Shared machine fixtures: the machine compiled once per test session for the Qwen3.5-2B
geometry (about a minute on 2 cores), and one in-memory model at a time (a 2B-wide stack
of 36 layers takes several GB)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from qwengpu.circuit import QWEN35_2B
from qwengpu.circuit.mute import synthetic_embedding

TEXT_ROWS = 2048


@pytest.fixture(scope="session")
def text_embedding() -> np.ndarray:
    rows = synthetic_embedding(TEXT_ROWS, QWEN35_2B.hidden, seed=7)
    return rows.float().numpy().astype(np.float64)


@pytest.fixture(scope="session")
def compiled_machine(text_embedding):
    from qwengpu.machine.model import compile_machine

    return compile_machine(QWEN35_2B, embedding=text_embedding)


class Backends:
    """Builds the in-memory model for a dtype, keeping only the latest one alive."""

    def __init__(self, machine, text) -> None:
        self.machine, self.text = machine, text
        self.dtype = None
        self.backend = None

    def get(self, dtype_name: str):
        import torch

        from qwengpu.host.model_backend import ModelBackend
        from qwengpu.machine.model import build_launch_model

        if self.dtype != dtype_name:
            self.backend = None
            gc.collect()  # free the previous model (its modules hold cycles) before the next
            rng = np.random.default_rng(3)
            norm = rng.normal(0.0, 0.1, QWEN35_2B.hidden)  # a base's final-norm weights
            model, offset = build_launch_model(
                self.machine,
                self.text,
                base_layers=4,
                dtype=getattr(torch, dtype_name),
                final_norm_weight=norm,
            )
            self.backend = ModelBackend(self.machine, model, offset)
            self.dtype = dtype_name
        return self.backend


@pytest.fixture(scope="session")
def backends(compiled_machine, text_embedding) -> Backends:
    return Backends(compiled_machine, text_embedding)
