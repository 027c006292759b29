"""The 4-lane 32-bit adder and multipliers, compiled into layers and checked on >= 1000
random pairs in float32 and bfloat16, through one prefill (chunked kernel) and token by
token with a cache (recurrent kernel)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from circuit_helpers import DTYPES, WIDE, WIDER, model_for

from qwengpu.circuit import QWEN35_2B, Bits, Circuit, compile_circuit

MASK = (1 << 32) - 1
LANES = 4
# 256 tokens x 4 lanes = 1024 pairs per dtype and path. Prefill as 4 sequences of 64
# tokens (one chunk each), decode as 32 sequences of 8 tokens (8 cached steps).
SHAPES = {"prefill": (4, 64), "decode": (32, 8)}
EDGE_PAIRS = [(MASK, MASK), (MASK, 1), (1 << 31, 1 << 31), (0, MASK), (0xFFFF, 0x10001)]


def pairs(seed: int, n_tokens: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, MASK + 1, (n_tokens, LANES), dtype=np.int64)
    b = rng.integers(0, MASK + 1, (n_tokens, LANES), dtype=np.int64)
    for k, (x, y) in enumerate(EDGE_PAIRS):
        a[k, k % LANES], b[k, k % LANES] = x, y
    return a, b


def to_signed(x: int) -> int:
    return x - (1 << 32) if x >> 31 else x


def reference(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        x, y = int(a[idx]), int(b[idx])
        if kind == "add":
            out[idx] = (x + y) & MASK
        elif kind == "mul_lo":
            out[idx] = (x * y) & MASK
        elif kind == "mulhu":
            out[idx] = (x * y) >> 32
        else:  # mulhs
            out[idx] = ((to_signed(x) * to_signed(y)) >> 32) & MASK
    return out


@cache
def compiled(kind: str, geometry_name: str):
    geometry = {"wide": WIDE, "wider": WIDER, "2b": QWEN35_2B}[geometry_name]
    c = Circuit(kind)
    a = c.input("a", Bits(32), lanes=LANES)
    b = c.input("b", Bits(32), lanes=LANES)
    if kind == "add":
        out = c.add(a, b)
    elif kind == "mul_lo":
        out = c.mul_lo(a, b)
    else:
        out = c.mul_hi(a, b, signed=kind == "mulhs")
    c.output(out)
    return compile_circuit(c, geometry, pad_to_pattern=False), out


def check(kind: str, geometry_name: str, capsys, seed: int = 0, dtypes=DTYPES) -> None:
    cc, out = compiled(kind, geometry_name)
    with capsys.disabled():
        print(
            f"\n{kind} (4 lanes, 32-bit) on {cc.geometry.name}: {cc.schedule.layers_used} "
            f"layers\n{cc.report()}"
        )
    a, b = pairs(seed)
    want = reference(kind, a, b)
    for dtype in dtypes:
        model = model_for(cc, dtype)
        for path, shape in SHAPES.items():
            embeds = cc.embed({"a": a, "b": b}).reshape(*shape, -1)
            residual = model.run(embeds=embeds, mode=path)
            got = cc.decode(residual, out).reshape(want.shape)
            wrong = int((got != want).sum())
            assert wrong == 0, f"{kind} {dtype} {path}: {wrong} of {want.size} wrong"
            cc.check_residual(residual)


def test_adder_1024_pairs(capsys):
    check("add", "wide", capsys)
    assert compiled("add", "wide")[0].schedule.layers_used == 2


def test_multiplier_1024_pairs(capsys):
    check("mul_lo", "wide", capsys)
    assert compiled("mul_lo", "wide")[0].schedule.layers_used == 5


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mulhu", "mulhs"])
def test_high_multipliers_1024_pairs(kind, capsys):
    check(kind, "wider", capsys)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["add", "mul_lo"])
def test_arith_at_2b_geometry(kind, capsys):
    check(kind, "2b", capsys, seed=1)
