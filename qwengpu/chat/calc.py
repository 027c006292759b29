"""The calculator: an expression's operations run as ready kernels on the machine, in
waves. A wave holds every operation whose operands are known, launched as one batch
(independent sequences, like CUDA streams); between waves the host only copies the
words one launch wrote into the next one's arguments. `qgpu calc` and the chat's normal
mode (`gpu_eval`) are this."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qwengpu.chat.expr import CalcError, Literal, Node, Op, parse
from qwengpu.chat.ops import Launch, error_message, plan, program
from qwengpu.errors import QgpuError
from qwengpu.isa.instr import Program
from qwengpu.isa.spec import MachineSpec

Value = int | list


@dataclass
class LaunchRecord:
    """One kernel launch of an evaluation, as it ran."""

    operation: str  # the subexpression it computed
    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    steps: int  # EXEC steps (blocks run)
    tokens: int  # tokens the model wrote (0 on the interpreter)
    checked: bool  # replayed against the interpreter
    seconds: float = 0.0  # its wave's time (launches of a wave run as one batch)

    def as_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "kernel": self.kernel,
            "grid": list(self.grid),
            "block": list(self.block),
            "steps": self.steps,
            "tokens": self.tokens,
            "checked": self.checked,
            "seconds": round(self.seconds, 4),
        }


@dataclass
class CalcResult:
    expression: str
    value: Value
    launches: list[LaunchRecord] = field(default_factory=list)
    seconds: float = 0.0  # the launches' time, compiles and layout excluded

    @property
    def tokens(self) -> int:
        return sum(launch.tokens for launch in self.launches)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "value": self.value,
            "launches": len(self.launches),
            "tokens": self.tokens,
            "seconds": round(self.seconds, 4),
            "tokens_per_second": round(self.tokens_per_second, 2),
            "kernels": [launch.as_dict() for launch in self.launches],
        }


def as_value(array: np.ndarray) -> Value:
    """An int, a list or a list of lists, as the user wrote them."""
    return array.tolist() if array.ndim else int(array)


class Calculator:
    """Evaluates expressions on a backend: "model" (the machine in the model's weights;
    `model` as for api.launch: a ModelBackend, a checkpoint directory, "memory[:2b]" or
    None for the default checkpoint, built from `base` on first use) or "interp" (the
    reference interpreter)."""

    def __init__(
        self,
        backend: str = "model",
        *,
        model: Any = None,
        dtype: str = "float32",
        base: str | None = None,
        device: str | None = None,
        check: bool = False,
        prefill: bool = True,
        max_steps: int | None = None,
        spec: MachineSpec | None = None,
        progress: Callable[[str], None] | None = None,
        full_forward: bool | None = None,
    ) -> None:
        if backend not in ("model", "interp"):
            raise CalcError(f"unknown backend '{backend}'; available: model, interp")
        self.backend = backend
        self.check = check
        self.prefill = prefill
        self.full_forward = full_forward  # every layer, or early exit (None: the model's default)
        self.max_steps = max_steps  # each launch's step budget (default: the machine's)
        self._spec = spec  # the interpreter's machine (default: the model's default machine)
        self._model: Any = None
        if backend == "model":
            from qwengpu.host.model_backend import ModelBackend, model_backend

            self._model = (
                model
                if isinstance(model, ModelBackend)
                else model_backend(
                    model,
                    dtype=dtype,
                    base=base,
                    device=device,
                    progress=progress,
                    circuit_only=not full_forward,  # early exit: the circuit's layers only
                )
            )

    @property
    def backend_model(self) -> Any:
        """The ModelBackend the launches run on (backend "model")."""
        if self._model is None:
            raise CalcError("this calculator runs on the interpreter, not on a model")
        return self._model

    @property
    def spec(self) -> MachineSpec:
        if self._model is not None:
            return self._model.machine.spec
        from qwengpu.machine.model import MACHINE_SPEC

        return self._spec or MACHINE_SPEC

    def evaluate(self, expression: str) -> CalcResult:
        return self.evaluate_many([expression])[0]

    def evaluate_many(self, expressions: Sequence[str]) -> list[CalcResult]:
        """Every expression's value; their independent operations share the waves."""
        trees = [parse(text) for text in expressions]
        results = [CalcResult(text.strip(), 0) for text in expressions]
        values: dict[int, np.ndarray] = {}
        owner: dict[int, int] = {}  # operation -> the expression it belongs to
        pending: list[Op] = []
        for index, tree in enumerate(trees):
            for op in _operations(tree):
                owner[id(op)] = index
                pending.append(op)
        while pending:
            ready = [op for op in pending if all(_known(arg, values) for arg in op.args)]
            launched = {id(op) for op in ready}
            pending = [op for op in pending if id(op) not in launched]
            operands = [[_value(arg, values) for arg in op.args] for op in ready]
            launches = [
                plan(op.name, op.text, args, self.spec)
                for op, args in zip(ready, operands, strict=True)
            ]
            programs = [program(launch.kernel, self.spec) for launch in launches]
            records, seconds = self._run(programs, launches)
            for op, launch, record in zip(ready, launches, records, strict=True):
                if launch.err is not None and int(launch.err[0]):
                    raise CalcError(error_message(op.name, op.text, int(launch.err[0])))
                values[id(op)] = np.asarray(launch.read(), np.int32)
                results[owner[id(op)]].launches.append(_record(op, launch, record, seconds))
            for index in {owner[id(op)] for op in ready}:
                results[index].seconds += seconds
        for result, tree in zip(results, trees, strict=True):
            result.value = as_value(_value(tree, values))
        return results

    def launch(
        self, kernel: Program, grid: Sequence[int], block: Sequence[int], args: list
    ) -> LaunchRecord:
        """One launch of a kernel of the caller's (the chat's advanced mode); arrays in
        `args` get their final contents."""
        job = Launch(kernel.name, tuple(grid), tuple(block), args, read=lambda: np.zeros(0))
        (ran,), seconds = self._run([kernel], [job])
        return LaunchRecord(kernel.name, kernel.name, job.grid, job.block, *ran, seconds)

    def _run(
        self, programs: list[Program], launches: list[Launch]
    ) -> tuple[list[tuple[int, int, bool]], float]:
        """(steps, tokens, checked) of each launch, and the wave's time."""
        started = time.perf_counter()
        try:
            if self._model is None:
                from qwengpu.api import launch as run_on_interpreter

                results = [
                    run_on_interpreter(
                        p, x.grid, x.block, x.args, max_steps=self.max_steps, trace=False
                    )
                    for p, x in zip(programs, launches, strict=True)
                ]
                return [(r.steps, 0, False) for r in results], time.perf_counter() - started
            from qwengpu.host.model_backend import LaunchRequest

            requests = [
                LaunchRequest(p, x.grid, x.block, x.args)
                for p, x in zip(programs, launches, strict=True)
            ]
            runs = self._model.launch_many(
                requests,
                prefill=self.prefill,
                max_steps=self.max_steps,
                full_forward=self.full_forward,
            )
        except QgpuError as exc:
            raise CalcError(f"{_kernels(launches)}: {exc}") from None
        seconds = time.perf_counter() - started
        if self.check:
            from qwengpu.host.check import check_launch

            for p, run in zip(programs, runs, strict=True):
                check_launch(p, run)
        return [(len(r.steps), len(r.generated), self.check) for r in runs], seconds


def _operations(tree: Node) -> list[Op]:
    """The tree's operations, operands before the operations that use them."""
    if isinstance(tree, Literal):
        return []
    found = [op for arg in tree.args for op in _operations(arg)]
    return [*found, tree]


def _known(node: Node, values: dict[int, np.ndarray]) -> bool:
    return isinstance(node, Literal) or id(node) in values


def _value(node: Node, values: dict[int, np.ndarray]) -> np.ndarray:
    return node.value if isinstance(node, Literal) else values[id(node)]


def _record(op: Op, launch: Launch, ran: tuple[int, int, bool], seconds: float) -> LaunchRecord:
    steps, tokens, checked = ran
    return LaunchRecord(
        op.text, launch.kernel, launch.grid, launch.block, steps, tokens, checked, seconds
    )


def _kernels(launches: list[Launch]) -> str:
    return ", ".join(sorted({launch.kernel for launch in launches}))
