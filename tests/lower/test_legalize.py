"""Legalization: without a high multiplier, mulhu/mulhs become pieces the ALU has, and the
program computes exactly what the native instructions compute."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from qwengpu import api
from qwengpu.isa.instr import Op
from qwengpu.isa.spec import DEFAULT_SPEC

KERNEL = """extern "C" __global__ void k(const unsigned* a, const unsigned* b, unsigned* out)
{{ int t = threadIdx.x; out[t] = {expr}; }}"""
EXPRESSIONS = {
    "mulhu": "__umulhi(a[t], b[t])",
    "mulhs": "(unsigned)__mulhi((int)a[t], (int)b[t])",
    "mulhu_imm": "__umulhi(a[t], 0x9E3779B9u)",
    "mulhs_neg_imm": "(unsigned)__mulhi((int)a[t], -7)",
    "mulhs_pos_imm": "(unsigned)__mulhi((int)a[t], 100003)",
    "div_const": "a[t] / 10u + (unsigned)((int)b[t] / -3)",
}
EDGES = [0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFF0000, 0x8001, 3]
NATIVE = dataclasses.replace(DEFAULT_SPEC, block_size=1, loads_per_block=1, rom_blocks=128)
PIECES = dataclasses.replace(NATIVE, mul_high=False)


def _ops(program) -> set[Op]:
    return {i.op for b in program.blocks for i in b.instrs}


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_mul_high_pieces_equal_the_native_instruction(name):
    src = KERNEL.format(expr=EXPRESSIONS[name])
    native, pieces = api.compile(src, spec=NATIVE), api.compile(src, spec=PIECES)
    assert {Op.MULHU, Op.MULHS} & _ops(native)
    assert not {Op.MULHU, Op.MULHS} & _ops(pieces)
    rng = np.random.default_rng(len(name))
    for a_vals, b_vals in [
        (EDGES, EDGES[::-1]),
        (EDGES[3:] + EDGES[:3], EDGES),
        (rng.integers(0, 2**32, 10), rng.integers(0, 2**32, 10)),
    ]:
        runs = []
        for program in (native, pieces):
            args = [
                np.array(a_vals, np.uint32),
                np.array(b_vals, np.uint32),
                np.zeros(10, np.uint32),
            ]
            api.launch(program, 1, 10, args)
            runs.append(args[2])
        np.testing.assert_array_equal(runs[1], runs[0], err_msg=name)
