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

    def __init__(
        self, message: str, line: int = 0, text: str = "", source: tuple[str, int] | None = None
    ) -> None:
        where = f"PTX line {line}: " if line else ""
        if source is not None:  # the CUDA line it came from (the compiler's line info)
            where = f"{source[0]}:{source[1]}: {where}"
        suffix = f"\n    {text}" if text else ""
        super().__init__(f"{where}{message}{suffix}")
        self.reason = message
        self.line = line
        self.text = text
        self.source = source

    def at_source(self, lines: dict[int, tuple[str, int]]) -> PtxError:
        """This error with the CUDA source line of its PTX line, where `lines` knows it."""
        if self.source is not None or self.line not in lines:
            return self
        return PtxError(self.reason, self.line, self.text, lines[self.line])


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
