"""The 2-stage pipeline against one instruction per pass: the same kernels launched on the
reduced machine built both ways (Qwen3.5-0.8B geometry, 4 base layers), in this process.
The one-instruction machine is the baseline.

    uv run python benchmarks/pipeline.py [--dtype bfloat16] [--cases dot,...|all] [--prefill]

Each machine takes about 40 s to build on 2 CPU cores and runs the kernels as one batch,
fed token by token (`--prefill`: the load tokens in one forward). Printed per machine: EXEC
steps, tokens the model wrote, circuit layers, seconds; then the ratios. Both machines'
results must equal the interpreter's.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CASES = "dot,reduce_sum,collatz,histogram,matmul4,shfl_down,binary_search"


def _suite():
    spec = importlib.util.spec_from_file_location(
        "qgpu_kernel_cases", ROOT / "tests" / "kernels" / "cases.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def requests(suite, names: list[str], spec) -> list:
    """Each case's launch request and the interpreter's answer for its arrays."""
    from qwengpu import api
    from qwengpu.host.model_backend import LaunchRequest

    cases = {c.name: c for c in suite.CASES}
    out = []
    for name in names:
        case = cases[name]
        program = api.compile(suite.load_source(case), case.kernel, spec=spec)
        args = case.make_args(np.random.default_rng(zlib.crc32(name.encode())))
        want = copy.deepcopy(args)
        api.launch(program, case.grid, case.block, want)
        out.append((LaunchRequest(program, case.grid, case.block, args), want))
    return out


def run(spec, names: list[str], dtype: str, suite, prefill: bool) -> dict:
    import torch

    from qwengpu.circuit import QWEN35_0_8B
    from qwengpu.circuit.mute import synthetic_embedding
    from qwengpu.host.model_backend import ModelBackend
    from qwengpu.machine.model import build_launch_model, compile_machine

    text = synthetic_embedding(2048, QWEN35_0_8B.hidden, seed=7).float().numpy()
    machine = compile_machine(QWEN35_0_8B, spec, embedding=text.astype(np.float64))
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


def main() -> None:
    from qwengpu.machine.model import REDUCED_SPEC

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--prefill", action="store_true", help="load tokens in one forward")
    args = parser.parse_args()
    suite = _suite()
    names = [c.name for c in suite.CASES] if args.cases == "all" else args.cases.split(",")
    one = dataclasses.replace(REDUCED_SPEC, block_size=1, loads_per_block=1, stores_alone=False)
    results = {}
    for label, spec in (("1 instruction per pass", one), ("2-stage pipeline", REDUCED_SPEC)):
        r = results[label] = run(spec, names, args.dtype, suite, args.prefill)
        print(
            f"{label}: {r['steps']} EXEC steps, {r['tokens']} tokens, {r['layers']} circuit "
            f"layers, {r['seconds']:.1f} s ({len(names)} kernels, {args.dtype}, one batch, "
            f"{'prefilled' if args.prefill else 'fed token by token'})"
        )
    base, new = results.values()
    print(
        f"pipeline / baseline: EXEC steps {new['steps'] / base['steps']:.2f}x, tokens "
        f"{new['tokens'] / base['tokens']:.2f}x, layers {new['layers'] / base['layers']:.2f}x, "
        f"time {new['seconds'] / base['seconds']:.2f}x"
    )


if __name__ == "__main__":
    main()
