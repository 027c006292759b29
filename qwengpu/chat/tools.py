"""The chat's two tools, as Qwen sees them (JSON schemas in its system turn) and as the host
runs them: `gpu_eval` (normal mode: an expression of ready kernels, chat.calc) and
`run_cuda` (advanced mode: Qwen's own kernel, compiled, lowered and launched on the model).
Either way the answer goes back as the tool response's text; every number in it was read
out of the model's recurrent state."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from qwengpu.chat.calc import Calculator, LaunchRecord
from qwengpu.errors import QgpuError
from qwengpu.isa.instr import STORE_OPS, Op, Program, TermKind

GPU_EVAL = {
    "type": "function",
    "function": {
        "name": "gpu_eval",
        "description": (
            "Compute an integer expression exactly on your own GPU. numpy notation: "
            "ints, lists [1, 2], matrices [[1, 2], [3, 4]], + - * // % ** and @ (dot "
            "product, matrix product), unary minus, and the functions sum max min sort "
            "cumsum reverse abs factorial gcd lcm fib isprime primes isqrt popcount. "
            "Values are int32."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "e.g. [1, 2, 3] @ [4, 5, 6]"}
            },
            "required": ["expression"],
        },
    },
}
RUN_CUDA = {
    "type": "function",
    "function": {
        "name": "run_cuda",
        "description": (
            'Compile a CUDA C++ kernel (one extern "C" __global__ function, int arithmetic '
            "only) and run it on your own GPU: 4-lane warps, 15 registers, 126 words of "
            "memory. Returns the final contents of every array argument."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "source": {"type": "string", "description": "the .cu source"},
                "grid": {"type": "string", "description": "CTAs: N or X,Y,Z"},
                "block": {"type": "string", "description": "threads per CTA: N or X,Y,Z"},
                "args": {
                    "type": "string",
                    "description": "one argument per line in parameter order: "
                    "int32:[1,2,3] for an array, int32:5 for a number",
                },
            },
            "required": ["source", "grid", "block", "args"],
        },
    },
}
TOOLS = {"normal": [GPU_EVAL], "advanced": [RUN_CUDA]}
ERROR_LINES = 6  # of a compiler's message, in a tool response


@dataclass
class ToolResult:
    """What a tool call gave: the text Qwen reads, and the launches behind it."""

    text: str
    ok: bool
    launches: list[LaunchRecord] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)  # the numbers read out of the state


def run_tool(name: str, arguments: dict[str, str], calculator: Calculator) -> ToolResult:
    """Run one tool call; a failure is a result too (Qwen reads it and may try again)."""
    try:
        if name == "gpu_eval":
            return _gpu_eval(arguments, calculator)
        if name == "run_cuda":
            return _run_cuda(arguments, calculator)
        return ToolResult(f"error: there is no tool '{name}'", ok=False)
    except QgpuError as exc:
        return ToolResult("error: " + _first_lines(str(exc)), ok=False)


def _first_lines(text: str) -> str:
    lines = text.strip().splitlines()
    shown = "\n".join(lines[:ERROR_LINES])
    return shown + (
        f"\n... ({len(lines) - ERROR_LINES} more lines)" if len(lines) > ERROR_LINES else ""
    )


def _argument(arguments: dict[str, str], name: str) -> str:
    if name not in arguments:
        raise ToolError(f"missing parameter '{name}'")
    return arguments[name].strip()


class ToolError(QgpuError):
    """A tool call that cannot run as written."""


def _gpu_eval(arguments: dict[str, str], calculator: Calculator) -> ToolResult:
    result = calculator.evaluate(_argument(arguments, "expression"))
    return ToolResult(json.dumps(result.value), True, result.launches, [result.value])


def _run_cuda(arguments: dict[str, str], calculator: Calculator) -> ToolResult:
    import numpy as np

    from qwengpu.api import compile as compile_kernel
    from qwengpu.host.argspec import parse_arg_spec, parse_dim3

    source = _argument(arguments, "source")
    grid = parse_dim3(_argument(arguments, "grid"), "grid")
    block = parse_dim3(_argument(arguments, "block"), "block")
    specs = _arg_specs(_argument(arguments, "args"))
    args = [parse_arg_spec(spec, i) for i, spec in enumerate(specs)]
    program = compile_kernel(source, spec=calculator.spec, filename="qwen.cu")
    if not depends_on_input(program):
        raise ToolError(
            f"'{program.name}' stores values that depend on no argument and no thread index: "
            "the compiler computed them, not the GPU; pass the numbers as arguments"
        )
    record = calculator.launch(program, grid, block, args)
    arrays = [(p.name, a) for p, a in zip(program.params, args, strict=True)]
    shown = {name: a.tolist() for name, a in arrays if isinstance(a, np.ndarray)}
    return ToolResult(json.dumps(shown), True, [record], list(shown.values()))


def _arg_specs(text: str) -> list[str]:
    """One spec per line (or a JSON list of them), in parameter order."""
    if text.startswith("[") and not re.match(r"\[\s*-?\d", text):
        try:
            specs = json.loads(text)
        except json.JSONDecodeError:
            specs = None
        if isinstance(specs, list) and all(isinstance(s, str) for s in specs):
            return specs
    return [line.strip() for line in text.splitlines() if line.strip()]


def depends_on_input(program: Program) -> bool:
    """Whether some stored value, or the control flow, can depend on what the launch reads
    (memory: the arguments) or on thread identity. If not, every number the kernel stores
    was fixed at compile time (NVRTC folds constant arithmetic), and running it would show
    the compiler's work as the GPU's. Registers are followed flow-insensitively, which can
    only find more dependence, never less."""
    sources = {Op.LD, Op.ATOM, Op.S2R, Op.SHFL, Op.VOTE}
    regs: set[int] = set()
    preds: set[int] = set()
    changed = True
    while changed:
        changed = False
        for block in program.blocks:
            for instr in block.instrs:
                tainted = (
                    instr.op in sources
                    or any(r in regs for r in instr.reads())
                    or any(p in preds for p in instr.pred_reads())
                )
                if not tainted:
                    continue
                new_regs = set(instr.writes()) - regs
                new_preds = set(instr.pred_writes()) - preds
                if new_regs or new_preds:
                    regs |= new_regs
                    preds |= new_preds
                    changed = True
    for block in program.blocks:
        if block.term.kind is TermKind.BRANCH and block.term.pred in preds:
            return True
        for instr in block.instrs:
            if instr.op is Op.ATOM:  # what it leaves counts the threads that ran it
                return True
            if instr.op in STORE_OPS:
                value = [] if instr.b_imm is not None else [instr.b]
                if any(r in regs for r in value) or (
                    instr.guard is not None and instr.guard in preds
                ):
                    return True
    return False
