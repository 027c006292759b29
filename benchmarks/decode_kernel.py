"""qwengpu's CPU decode path against transformers' modules and torch kernel, all run in
this process: first the delta-rule kernel (qwengpu.host.decode_kernel) alone on one
layer's inputs, then whole launches written by the model token by token, with the kernel
alone and with the kernel and the layers' live parts (qwengpu.host.live_decode).

    uv run python benchmarks/decode_kernel.py [--dtype bfloat16] [--batch 16] [--repeat 20]

The launches run on the in-memory reduced machine (Qwen3.5-0.8B geometry, 4 base layers;
about 40 s to build on 2 CPU cores): `--batch` copies of the dot product as one batch,
once per configuration. The ratios are transformers' time over qwengpu's; the tokens
the model writes must be the same under all.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
HEADS, HEAD_DIM = 16, 128  # a Qwen3.5 DeltaNet layer (0.8B and 2B alike)


def layer_inputs(batch: int, circuit: bool, seed: int = 0) -> tuple:
    """One decode step's kernel inputs: q, k, v, g, beta and a float32 state. `circuit`: as
    in a circuit layer, no decay (g = 0) and one head of each sequence writing (beta 0 in
    the others); else random, every head decaying and writing."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, 1, HEADS, HEAD_DIM, generator=gen) for _ in range(3))
    g = -torch.rand(batch, 1, HEADS, generator=gen)
    beta = torch.rand(batch, 1, HEADS, generator=gen)
    if circuit:
        g.zero_()
        beta[..., 1:] = 0
    state = torch.randn(batch, HEADS, HEAD_DIM, HEAD_DIM, generator=gen)
    return q, k, v, g, beta, state


def time_kernel(kernel, inputs: tuple, repeat: int) -> float:
    """Seconds per call, the best of `repeat` (the state is updated in place each call)."""
    q, k, v, g, beta, state = inputs
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        _, state = kernel(q, k, v, g, beta, state, True, True)
        best = min(best, time.perf_counter() - start)
    return best


def dot_request(program):
    from qwengpu.host.model_backend import LaunchRequest

    args = [
        np.array([1, 2, 3], np.int32),
        np.array([4, 5, 6], np.int32),
        np.zeros(1, np.int32),
        np.int32(3),
    ]
    return LaunchRequest(program, 1, 4, args)


def main() -> None:
    import torch
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5

    from qwengpu import api
    from qwengpu.host.decode_kernel import recurrent_gated_delta_rule
    from qwengpu.host.live_decode import LiveParts
    from qwengpu.host.model_backend import default_backend

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    torch.set_grad_enabled(False)

    reference = qwen3_5.torch_recurrent_gated_delta_rule
    for circuit, what in ((False, "every head writing"), (True, "a circuit layer")):
        inputs = layer_inputs(args.batch, circuit)
        ref_s = time_kernel(reference, tuple(x.clone() for x in inputs), args.repeat)
        mine_s = time_kernel(
            recurrent_gated_delta_rule, tuple(x.clone() for x in inputs), args.repeat
        )
        print(
            f"one layer ({what}), batch {args.batch}: transformers {ref_s * 1e3:.2f} ms "
            f"(baseline), qwengpu {mine_s * 1e3:.2f} ms: {ref_s / mine_s:.2f}x"
        )

    backend = default_backend(args.dtype, "0.8b")
    program = api.compile((ROOT / "examples" / "dot.cu").read_text(), spec=backend.machine.spec)
    configurations = {
        "transformers": (False, None),
        "qwengpu kernel": (True, LiveParts({})),
        "qwengpu kernel + live parts": (True, None),
    }
    per_pass, written = {}, {}
    for name, (fast, live) in configurations.items():
        backend.fast_decode, backend.live_parts = fast, live
        requests = [dot_request(program) for _ in range(args.batch)]
        runs = backend.launch_many(requests, prefill=False)
        assert all(int(r.args[2][0]) == 32 for r in requests), "the dot product is not 32"
        passes = runs[0].prompt_tokens + len(runs[0].generated) - 1  # the last is not fed
        per_pass[name] = runs[0].seconds / passes
        written[name] = [r.generated for r in runs]
        assert written[name] == written["transformers"], f"{name}: the model wrote other tokens"
    baseline = per_pass["transformers"]
    print(
        f"launches, {args.dtype}, batch {args.batch}, token by token: transformers "
        f"{baseline * 1e3:.0f} ms per pass (baseline)"
    )
    for name, seconds in list(per_pass.items())[1:]:
        print(
            f"  {name}: {seconds * 1e3:.0f} ms per pass, {baseline / seconds:.2f}x; "
            f"{seconds / args.batch * 1e3:.1f} ms per launch-token"
        )


if __name__ == "__main__":
    main()
