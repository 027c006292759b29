"""An attention layer's cache in decode passes: transformers' DynamicLayer (each pass
concatenates the new position onto every cached one) against qwengpu's GrowingLayer
(qwengpu.host.batch_cache: the new position written in place into buffers with room), both
run in this process on the same keys, values and queries.

    uv run python benchmarks/batch_cache.py [--dtype bfloat16] [--batch 64] [--cached 600]
        [--passes 400]

One pass is the cache update plus the attention read over it (torch's scaled dot-product
attention, one query per row, grouped heads as Qwen3.5-0.8B's base attention: 8 query
heads on 2 key/value heads of 256). The ratio is DynamicLayer's time over GrowingLayer's;
the attention outputs must be equal to the bit.
"""

from __future__ import annotations

import argparse
import time

KV_HEADS, GROUP, HEAD_DIM = 2, 4, 256  # Qwen3.5-0.8B's full attention


def run(layer, steps) -> tuple[float, list]:
    """Seconds for the passes over a prefilled layer, and each pass's attention output."""
    import torch.nn.functional as F

    outputs = []
    start = time.perf_counter()
    for key, value, query in steps:
        keys, values = layer.update(key, value)
        outputs.append(F.scaled_dot_product_attention(query, keys, values))
    return time.perf_counter() - start, outputs


def main() -> None:
    import torch
    from transformers.cache_utils import DynamicLayer

    from qwengpu.host.batch_cache import GrowingLayer

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--cached", type=int, default=600, help="positions after the prefill")
    parser.add_argument("--passes", type=int, default=400)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    b = args.batch
    prefill = (randn(b, KV_HEADS, args.cached, HEAD_DIM), randn(b, KV_HEADS, args.cached, HEAD_DIM))
    steps = [
        (
            randn(b, KV_HEADS, 1, HEAD_DIM),
            randn(b, KV_HEADS, 1, HEAD_DIM),
            randn(b, KV_HEADS, GROUP, HEAD_DIM),  # a token's queries, grouped by key head
        )
        for _ in range(args.passes)
    ]
    prefilled = [DynamicLayer(), DynamicLayer()]
    for layer in prefilled:
        layer.update(*prefill)
    base_s, want = run(prefilled[0], steps)
    mine_s, got = run(GrowingLayer(prefilled[1]), steps)
    assert all(map(torch.equal, got, want)), "GrowingLayer's attention differs"
    print(
        f"{args.passes} passes, {args.dtype}, batch {b}, {args.cached} cached positions: "
        f"DynamicLayer {base_s / args.passes * 1e3:.2f} ms per pass (baseline), "
        f"GrowingLayer {mine_s / args.passes * 1e3:.2f} ms: {base_s / mine_s:.2f}x"
    )


if __name__ == "__main__":
    main()
