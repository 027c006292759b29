"""qwengpu: a CUDA GPU compiled into the weights of a Qwen3.5 language model.

The public API is loaded lazily so that `import qwengpu.interp` (or the CLI) does not pull
in the whole toolchain.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Calculator": "qwengpu.chat.calc",
    "Chat": "qwengpu.chat.session",
    "RawKernel": "qwengpu.api",
    "LaunchResult": "qwengpu.api",
    "compile": "qwengpu.api",
    "launch": "qwengpu.api",
    "lower_ptx": "qwengpu.api",
    "at": "qwengpu.host.launch",
    "QgpuError": "qwengpu.errors",
    "MachineSpec": "qwengpu.isa.spec",
    "DEFAULT_SPEC": "qwengpu.isa.spec",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'qwengpu' has no attribute {name!r}")
