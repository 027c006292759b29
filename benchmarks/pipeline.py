"""The model's pipeline against one instruction per pass: the same kernels launched on the
machine built each way (4 base layers), in this process. The one-instruction machine is
the baseline.

    uv run python benchmarks/pipeline.py [--geometry 0.8b|2b] [--dtype bfloat16]
        [--cases dot,...|all] [--prefill]

`--geometry 0.8b` (default): the reduced machine (2-lane warps), one instruction per pass
against `REDUCED_SPEC`'s 2-stage pipeline; each build takes about 40 s on 2 CPU cores.
`--geometry 2b`: the full machine (4-lane warps), one instruction per pass against blocks
of two and `MACHINE_SPEC`'s four stages, one machine at a time (about 16 minutes in all,
peak RSS 22 GB). Each machine runs the kernels as one batch, fed token by token
(`--prefill`: the load tokens in one forward). Printed per machine: EXEC steps, tokens the
model wrote, circuit layers, seconds; then the ratios. Every machine's results must equal
the interpreter's.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import time
import zlib

import numpy as np
from suite_cases import compile_case, load_suite

DEFAULT_CASES = "dot,reduce_sum,collatz,histogram,matmul4,shfl_down,binary_search"


def requests(suite, names: list[str], spec) -> list:
    """Each case's launch request and the interpreter's answer for its arrays."""
    from qwengpu import api
    from qwengpu.host.model_backend import LaunchRequest

    cases = {c.name: c for c in suite.CASES}
    out = []
    for name in names:
        case = cases[name]
        program = compile_case(suite, case, spec)
        args = case.make_args(np.random.default_rng(zlib.crc32(name.encode())))
        want = copy.deepcopy(args)
        api.launch(program, case.grid, case.block, want)
        out.append((LaunchRequest(program, case.grid, case.block, args), want))
    return out


def run(geometry, spec, names: list[str], dtype: str, suite, prefill: bool) -> dict:
    import torch

    from qwengpu.circuit.mute import synthetic_embedding
    from qwengpu.host.model_backend import ModelBackend
    from qwengpu.machine.model import build_launch_model, compile_machine

    text = synthetic_embedding(2048, geometry.hidden, seed=7).float().numpy()
    machine = compile_machine(geometry, spec, embedding=text.astype(np.float64))
    model, offset = build_launch_model(machine, text, base_layers=4, dtype=getattr(torch, dtype))
    backend = ModelBackend(machine, model, offset)
    jobs = requests(suite, names, spec)
    start = time.perf_counter()
    runs = backend.launch_many([r for r, _ in jobs], prefill=prefill)
    seconds = time.perf_counter() - start
    for (request, want), name in zip(jobs, names, strict=True):
        for got, expected in zip(request.args, want, strict=True):
            if isinstance(got, np.ndarray):
                assert np.array_equal(got, expected), f"{name}: model != interpreter"
    layers = machine.compiled.schedule.layers_used
    return {
        "steps": sum(len(r.steps) for r in runs),
        "tokens": sum(len(r.generated) for r in runs),
        "layers": layers,
        "seconds": seconds,
    }


def machines(geometry: str) -> tuple:
    """The geometry and its (label, spec) pairs, the one-instruction baseline first."""
    from qwengpu.circuit import QWEN35_0_8B, QWEN35_2B
    from qwengpu.machine.model import MACHINE_SPEC, REDUCED_SPEC, single_stage

    if geometry == "0.8b":
        one = ("1 instruction per pass", single_stage(REDUCED_SPEC))
        return QWEN35_0_8B, [one, ("2-stage pipeline", REDUCED_SPEC)]
    two = dataclasses.replace(MACHINE_SPEC, block_size=2, loads_per_block=2)
    return QWEN35_2B, [
        ("1 instruction per pass", single_stage(MACHINE_SPEC)),
        ("2-stage pipeline", two),
        ("4-stage pipeline", MACHINE_SPEC),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--geometry", default="0.8b", choices=("0.8b", "2b"))
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--prefill", action="store_true", help="load tokens in one forward")
    args = parser.parse_args()
    suite = load_suite()
    names = [c.name for c in suite.CASES] if args.cases == "all" else args.cases.split(",")
    geometry, specs = machines(args.geometry)
    results = {}
    for label, spec in specs:
        r = results[label] = run(geometry, spec, names, args.dtype, suite, args.prefill)
        gc.collect()  # one machine in memory at a time
        print(
            f"{label}: {r['steps']} EXEC steps, {r['tokens']} tokens, {r['layers']} circuit "
            f"layers, {r['seconds']:.1f} s ({len(names)} kernels, {geometry.name}, "
            f"{args.dtype}, one batch, {'prefilled' if args.prefill else 'fed token by token'})",
            flush=True,
        )
    base = results[specs[0][0]]
    for label, _ in specs[1:]:
        new = results[label]
        print(
            f"{label} / baseline: EXEC steps {new['steps'] / base['steps']:.2f}x, tokens "
            f"{new['tokens'] / base['tokens']:.2f}x, layers "
            f"{new['layers'] / base['layers']:.2f}x, time {new['seconds'] / base['seconds']:.2f}x"
        )


if __name__ == "__main__":
    main()
