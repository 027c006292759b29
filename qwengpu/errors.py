"""Errors a user can act on. The CLI prints them without a traceback."""

from __future__ import annotations


class QgpuError(Exception):
    """Base of every error qwengpu reports to a user."""


class CompileError(QgpuError):
    """CUDA -> PTX failed; the message carries the compiler's own log (file:line: ...)."""


class CompilerNotFound(QgpuError):
    """The requested CUDA compiler is not installed."""


class PtxError(QgpuError):
    """The PTX could not be parsed, or uses something the machine does not support."""

    def __init__(self, message: str, line: int = 0, text: str = "") -> None:
        where = f"PTX line {line}: " if line else ""
        suffix = f"\n    {text}" if text else ""
        super().__init__(f"{where}{message}{suffix}")
        self.line = line
        self.text = text


class ResourceError(QgpuError):
    """A kernel or launch needs more of something than the MachineSpec has."""


class ArgError(QgpuError, ValueError):
    """A bad argument: launch arguments that do not match the kernel or do not fit machine
    memory, an unknown option, a source that is not text."""


class LaunchError(QgpuError):
    """A launch failed while running (trap, step budget)."""


class TrapError(LaunchError):
    """The kernel did something the hardware traps on (illegal address, misalignment)."""


class StepLimitError(LaunchError):
    """The launch ran past its step budget (a runaway loop?)."""


class CircuitError(QgpuError):
    """A circuit is malformed, does not fit a geometry, or cannot be muted exactly."""


class ModelError(QgpuError):
    """A base model cannot be fetched, read or used (missing, offline, unsupported layout)."""


class CheckpointError(QgpuError):
    """A merged checkpoint is missing, corrupt, or built for another MachineSpec/compiler."""
