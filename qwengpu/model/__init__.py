"""Base models, the circuit interface, the checkpoint builder, verification and drift.

Public surface (imported lazily: torch and transformers load only when used):
    CircuitLayer, CircuitLayers, BaseInfo, CircuitCompiler  the circuit interface
    PassthroughCircuit                                       muted do-nothing stand-in
    MuteDirection, find_mute_direction, MUTE_THRESHOLD       muting
    resolve_base, BaseCheckpoint                             --base (hub, local, synthetic)
    build_checkpoint, BuildResult                            qgpu build
    verify_checkpoint, load_checkpoint                       the runtime's checks + loading
    measure_drift, DriftReport                               qgpu drift
    default_checkpoint, ensure_checkpoint, default_base      the model backend's default
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "CircuitLayer": "qwengpu.model.circuit_layers",
    "CircuitLayers": "qwengpu.model.circuit_layers",
    "BaseInfo": "qwengpu.model.circuit_layers",
    "CircuitCompiler": "qwengpu.model.circuit_layers",
    "PassthroughCircuit": "qwengpu.model.passthrough",
    "MuteDirection": "qwengpu.model.muting",
    "find_mute_direction": "qwengpu.model.muting",
    "MUTE_THRESHOLD": "qwengpu.model.muting",
    "resolve_base": "qwengpu.model.base",
    "BaseCheckpoint": "qwengpu.model.base",
    "build_checkpoint": "qwengpu.model.merge",
    "BuildResult": "qwengpu.model.merge",
    "verify_checkpoint": "qwengpu.model.manifest",
    "load_checkpoint": "qwengpu.model.manifest",
    "measure_drift": "qwengpu.model.drift",
    "DriftReport": "qwengpu.model.drift",
    "default_checkpoint": "qwengpu.model.defaults",
    "ensure_checkpoint": "qwengpu.model.defaults",
    "default_base": "qwengpu.model.defaults",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'qwengpu.model' has no attribute {name!r}")
