"""Launch speed of the model backend: tokens per second written by the model, per dtype,
against the interpreter's launch of the same program in the same process (the baseline).

    uv run python benchmarks/model_launch.py [--dtype float32] [--model memory|DIR]

By default builds the in-memory machine model (the machine at the Qwen3.5-2B geometry
and 4 base layers; about 2 minutes on 2 CPU cores); `--model DIR` loads a checkpoint from
`qgpu build` instead. Then times one launch of the dot product per dtype.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from qwengpu import api
from qwengpu.host.model_backend import model_backend

ROOT = Path(__file__).resolve().parents[1]


def dot_args() -> list:
    return [
        np.array([1, 2, 3], np.int32),
        np.array([4, 5, 6], np.int32),
        np.zeros(1, np.int32),
        np.int32(3),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", action="append", choices=("float32", "bfloat16"))
    parser.add_argument("--model", default="memory", help="memory (default) or a checkpoint")
    args = parser.parse_args()
    dtypes = args.dtype or ["float32", "bfloat16"]
    spec = model_backend(args.model, dtype=dtypes[0]).machine.spec
    program = api.compile((ROOT / "examples" / "dot.cu").read_text(), spec=spec)

    start = time.perf_counter()
    api.launch(program, 1, 4, dot_args())
    interp_s = time.perf_counter() - start
    print(f"interpreter: {interp_s * 1e3:.2f} ms per launch (baseline)")
    for dtype in dtypes:
        backend = model_backend(args.model, dtype=dtype)
        launch_args = dot_args()
        run = backend.launch(program, 1, 4, launch_args)
        assert int(launch_args[2][0]) == 32
        tokens = len(run.generated)
        print(
            f"model {dtype}: {run.seconds:.1f} s per launch, {tokens} tokens written "
            f"({tokens / run.seconds:.2f} tokens/s, {run.prompt_tokens} load tokens prefilled), "
            f"{run.seconds / interp_s:.0f}x the interpreter's time"
        )


if __name__ == "__main__":
    main()
