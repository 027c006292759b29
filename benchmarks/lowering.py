"""Lowering quality over the kernel suite: ROM blocks, instructions and executed steps
(a step is one EXEC token on the model backend), against the lower bound of full blocks.

    uv run python benchmarks/lowering.py
"""

from __future__ import annotations

import importlib.util
import zlib
from pathlib import Path

import numpy as np

import qwengpu

SUITE = Path(__file__).resolve().parents[1] / "tests" / "kernels" / "cases.py"


def load_cases():
    spec = importlib.util.spec_from_file_location("suite_cases", SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    suite = load_cases()
    blocks = instructions = steps = 0
    for case in suite.CASES:
        program = qwengpu.compile(suite.load_source(case), case.kernel)
        args = case.make_args(np.random.default_rng(zlib.crc32(case.name.encode())))
        blocks += len(program.blocks)
        instructions += sum(len(b.instrs) for b in program.blocks)
        steps += qwengpu.launch(program, case.grid, case.block, args, trace=False).steps
    full = -(-instructions // qwengpu.DEFAULT_SPEC.block_size)
    print(f"{len(suite.CASES)} kernels: {instructions} instructions in {blocks} ROM blocks")
    print(f"blocks / full-block lower bound: {blocks / full:.3f}")
    print(f"steps: {steps} ({steps / len(suite.CASES):.1f} per launch)")


if __name__ == "__main__":
    main()
