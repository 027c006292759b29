"""Launch speed: early exit (the default) against the full forward, in the same process.

    uv run python benchmarks/launch_speed.py [--model memory|memory:2b|DIR ...]
        [--dtype float32|bfloat16 ...] [--device cpu|cuda] [--batch 64] [--no-full-batch]
        [--early-exit-only]

For each model and dtype: one launch of each kernel (dot, collatz, matmul4; the load
tokens in one prefill), then a batch of `--batch` launches (the three kernels in turn,
each with its own arguments), each run with early exit and with the full forward (every
layer and the whole LM head: the baseline). Printed: tokens the model wrote, seconds
(prefill included), tokens per second and the ratio. Every launch's arrays must equal
the interpreter's, and the two paths' tokens must be identical. `--model DIR` is a
checkpoint from `qgpu build` (e.g. `--base synthetic:2b`); `memory:*` builds the machine
with 4 random base layers in memory. `--early-exit-only` loads a checkpoint's circuit
layers alone, as `qgpu run` does (the 2B checkpoint in float32 does not fit 24 GB whole),
and times early exit without its baseline. docs/protocol.md records the figures.
"""

from __future__ import annotations

import argparse
import copy
import time
import zlib

import numpy as np
from suite_cases import compile_case, load_suite

KERNELS = ("dot", "collatz", "matmul4")


def requests(backend, names: list[str]) -> list:
    """Each named case's launch request (seeded by its position) and the interpreter's
    answer for its arrays."""
    from qwengpu import api
    from qwengpu.host.model_backend import LaunchRequest

    suite = load_suite()
    cases = {c.name: c for c in suite.CASES}
    spec = backend.machine.spec
    programs = {n: compile_case(suite, cases[n], spec) for n in set(names)}
    out = []
    for k, name in enumerate(names):
        case = cases[name]
        args = case.make_args(np.random.default_rng(zlib.crc32(f"{name}{k}".encode())))
        want = copy.deepcopy(args)
        api.launch(programs[name], case.grid, case.block, want)
        out.append((LaunchRequest(programs[name], case.grid, case.block, args), want))
    return out


def timed(backend, names: list[str], full_forward: bool) -> tuple[list, float]:
    """The launches as one batch: their runs (checked against the interpreter) and the
    wall time."""
    jobs = requests(backend, names)
    start = time.perf_counter()
    runs = backend.launch_many([r for r, _ in jobs], full_forward=full_forward)
    seconds = time.perf_counter() - start
    for (request, want), name in zip(jobs, names, strict=True):
        for got, expected in zip(request.args, want, strict=True):
            if isinstance(got, np.ndarray) and not np.array_equal(got, expected):
                raise SystemExit(f"{name}: the model's result differs from the interpreter's")
    return runs, seconds


def compare(label: str, backend, names: list[str], full: bool) -> None:
    """One line: early exit's rate, the full forward's, and the ratio (full=False: early
    exit alone)."""
    fast, fast_s = timed(backend, names, full_forward=False)
    tokens = sum(len(r.generated) for r in fast)
    line = f"{label}: {tokens} tokens; early exit {fast_s:.2f} s ({tokens / fast_s:.1f} tokens/s)"
    if full:
        slow, slow_s = timed(backend, names, full_forward=True)
        if [r.generated for r in slow] != [r.generated for r in fast]:
            raise SystemExit(f"{label}: early exit and the full forward wrote different tokens")
        line += (
            f"; full forward {slow_s:.2f} s ({tokens / slow_s:.1f} tokens/s); "
            f"{slow_s / fast_s:.1f}x"
        )
    print(line, flush=True)


def main() -> None:
    from qwengpu.host.model_backend import model_backend

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", action="append", help="memory, memory:2b or a checkpoint")
    parser.add_argument("--dtype", action="append", choices=("float32", "bfloat16"))
    parser.add_argument("--device", help="cpu (default: the first of cuda, mps, cpu)")
    parser.add_argument("--batch", type=int, default=64, help="launches in the batch")
    parser.add_argument(
        "--no-full-batch", action="store_true", help="the batch with early exit only"
    )
    parser.add_argument(
        "--early-exit-only",
        action="store_true",
        help="load a checkpoint's circuit layers only and time early exit alone",
    )
    args = parser.parse_args()
    alone = args.early_exit_only
    for model in args.model or ["memory"]:
        for dtype in args.dtype or ["float32", "bfloat16"]:
            backend = model_backend(model, dtype=dtype, device=args.device, circuit_only=alone)
            where = f"{model}, {dtype}, {backend.model.device}"
            print(f"# {where}: {backend.bound.describe()}", flush=True)
            timed(backend, ["dot"], full_forward=False)  # warm-up: live parts, kernels
            for name in KERNELS:
                compare(f"{name} ({where})", backend, [name], full=not alone)
            batch = [KERNELS[k % len(KERNELS)] for k in range(args.batch)]
            label = f"batch of {args.batch} ({where})"
            compare(label, backend, batch, full=not (args.no_full_batch or alone))


if __name__ == "__main__":
    main()
