"""The lowering: exact expansions, block order for reconvergence, allocation, refusals."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import qwengpu
from qwengpu.errors import PtxError
from qwengpu.isa.instr import Op, Program, TermKind

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
INT32 = st.integers(-(2**31), 2**31 - 1)


def load_suite():
    spec = importlib.util.spec_from_file_location("suite_cases", KERNELS / "cases.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


SUITE = load_suite()


@cache
def suite_program(name: str) -> Program:
    case = next(c for c in SUITE.CASES if c.name == name)
    return qwengpu.compile(SUITE.load_source(case), case.kernel)


def assert_reconvergence_order(program: Program) -> None:
    """Forward edges go up; each loop [header..latch] is left only to a higher block."""
    for src, block in enumerate(program.blocks):
        for dst in block.term.successors():
            if dst > src:
                continue
            # a back edge src -> dst: everything in dst..src is the loop
            for member in range(dst, src + 1):
                for exit_to in program.blocks[member].term.successors():
                    assert dst <= exit_to <= src or exit_to > src, (program.name, member)


@pytest.mark.parametrize("name", [c.name for c in SUITE.CASES])
def test_suite_programs_respect_the_machine_and_the_block_order(name: str) -> None:
    program = suite_program(name)
    program.validate()
    assert_reconvergence_order(program)
    assert program.registers_used <= program.spec.usable_registers


# div and rem of the same operands share one expansion; two expansions fit the ROM
DIVISION_KERNEL = """
extern "C" __global__ void divide(const int* a, const int* b, int* out) {
    int n = a[0], d = b[0];
    out[0] = n / d; out[1] = n % d;
    out[2] = (unsigned)n / (unsigned)d; out[3] = (unsigned)n % (unsigned)d;
}
"""


@cache
def division_kernel() -> qwengpu.RawKernel:
    kernel = qwengpu.RawKernel(DIVISION_KERNEL, "divide")
    assert kernel.program.blocks  # compile once, here
    return kernel


def ptx_division(n: int, d: int) -> list[int]:
    """PTX div/rem (C truncation); by zero: unsigned q = ~0, r = n, signs applied."""
    un, ud = n % 2**32, d % 2**32
    uq, ur = (un // ud, un % ud) if ud else (2**32 - 1, un)
    if d == 0:
        q = -1 if n >= 0 else 1
        r = n
    else:
        q = abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1)
        r = n - q * d
    return [q % 2**32, r % 2**32, uq, ur]


@settings(max_examples=60, deadline=None)
@given(INT32, st.one_of(INT32, st.sampled_from([0, 1, -1, 2, -2, 7, -(2**31)])))
def test_division_expansion_is_exact(n: int, d: int) -> None:
    out = np.zeros(4, np.int32)
    division_kernel()(1, 1, [np.array([n], np.int32), np.array([d], np.int32), out])
    assert out.view(np.uint32).tolist() == ptx_division(n, d)


def test_int_min_divided_by_minus_one_wraps() -> None:
    out = np.zeros(4, np.int32)
    division_kernel()(1, 1, [np.array([-(2**31)], np.int32), np.array([-1], np.int32), out])
    assert out[0] == -(2**31) and out[1] == 0


def test_unused_atomic_result_writes_no_register() -> None:
    program = suite_program("dot_atomic")
    atoms = [i for b in program.blocks for i in b.instrs if i.op is Op.ATOM]
    assert atoms and all(i.rd == 0 for i in atoms)


def test_moves_are_coalesced_away() -> None:
    program = suite_program("dot_atomic")
    moves = [i for b in program.blocks for i in b.instrs if i.op is Op.ADD and i.b_imm == 0 and i.a]
    assert not moves


def test_divergent_loop_reconverges_after_the_loop() -> None:
    source = """
    extern "C" __global__ void k(int* out) {
        int t = threadIdx.x, s = 0;
        for (int i = 0; i <= t; ++i) s += i;
        out[t] = __shfl_down_sync(0xf, s, 1, 4);
    }"""
    out = np.zeros(4, np.int32)
    result = qwengpu.RawKernel(source, "k")(1, 4, [out])
    assert out.tolist() == [1, 3, 6, 6]
    shuffle_blocks = {
        n
        for n, b in enumerate(qwengpu.compile(source, "k").blocks)
        if any(i.op is Op.SHFL for i in b.instrs)
    }
    shuffle_steps = [s for s in result.trace if s.block in shuffle_blocks]
    assert [s.active for s in shuffle_steps] == [(0, 1, 2, 3)]


def test_barrier_after_divergence_is_one_barrier() -> None:
    source = """
    extern "C" __global__ void k(int* out) {
        __shared__ int s[8];
        int t = threadIdx.x;
        if (t & 1) s[t] = t * 10; else s[t] = t;
        __syncthreads();
        out[t] = s[7 - t];
    }"""
    out = np.zeros(8, np.int32)
    result = qwengpu.RawKernel(source, "k")(1, 8, [out])
    assert out.tolist() == [70, 6, 50, 4, 30, 2, 10, 0]
    program = qwengpu.compile(source, "k")
    barriers = [n for n, b in enumerate(program.blocks) if b.term.kind is TermKind.BARRIER]
    assert len(barriers) == 1
    assert [s.active for s in result.trace if s.block == barriers[0]] == [(0, 1, 2, 3)] * 2


def test_sixty_four_bit_data_is_refused_clearly() -> None:
    source = """
    extern "C" __global__ void k(unsigned long long* a, unsigned long long d) {
        a[0] = a[0] / d;
    }"""
    with pytest.raises(PtxError, match="64-bit .* not supported"):
        qwengpu.compile(source, "k")


def test_narrow_loads_and_stores_keep_neighbouring_bytes() -> None:
    source = """
    extern "C" __global__ void k(unsigned char* b) {
        int t = threadIdx.x;
        b[t] = (unsigned char)(b[t] + 1);
    }"""
    data = np.array([0, 255, 7, 128, 9, 9, 9, 9], np.uint8)
    qwengpu.RawKernel(source, "k")(1, 4, [data])
    assert data.tolist() == [1, 0, 8, 129, 9, 9, 9, 9]


def test_stores_alone_keeps_a_store_or_atomic_in_a_block_of_its_own() -> None:
    """The model's machines re-run a store's block on each lane's pass (MachineSpec
    stores_alone): the lowering packs around stores, and validation names the block."""
    import dataclasses

    from qwengpu.isa.instr import Block, Instr, Terminator
    from qwengpu.isa.spec import DEFAULT_SPEC

    spec = dataclasses.replace(DEFAULT_SPEC, stores_alone=True)
    source = """extern "C" __global__ void k(int* a, int* b) {
        int i = threadIdx.x; a[i] = a[i] * 3 + 1; b[i] = a[i] + i; atomicAdd(b, i); }"""
    program = qwengpu.compile(source, spec=spec)
    stores = [b for b in program.blocks if any(i.op in (Op.ST, Op.ATOM) for i in b.instrs)]
    assert len(stores) == 3 and all(len(b.instrs) == 1 for b in stores)
    assert max(len(b.instrs) for b in program.blocks) > 1  # the rest still packs
    add = Instr(Op.ADD, rd=1, a=1, b_imm=1)
    store = Instr(Op.ST, a=2, b=1)
    bad = Program("k", (Block((add, store), Terminator(TermKind.EXIT)),), (), 0, 2, 0, spec)
    with pytest.raises(ValueError, match="B0 has a store/atomic and 1 other instructions"):
        bad.validate()


@pytest.mark.parametrize("lanes", [4, 2])
def test_warp_size_is_the_target_machines_lane_count(lanes: int) -> None:
    """`warpSize` (PTX's WARP_SZ) lowers to the lanes of the machine the program is lowered
    for, so a kernel that strides by it follows the machine's own warps."""
    import dataclasses

    from qwengpu.isa.spec import DEFAULT_SPEC

    spec = dataclasses.replace(DEFAULT_SPEC, lanes=lanes, warps=16 // lanes)
    source = 'extern "C" __global__ void k(int* out) { out[threadIdx.x] = warpSize; }'
    program = qwengpu.compile(source, spec=spec)
    out = np.zeros(4, np.int32)
    qwengpu.launch(program, 1, 4, [out])
    assert out.tolist() == [lanes] * 4


@pytest.mark.parametrize(
    ("source", "args", "want"),
    [
        ("const int4* in, int* out) { int4 v = in[threadIdx.x];"
         " out[threadIdx.x] = v.x + v.y * v.z - v.w; }",
         [np.arange(1, 9, dtype=np.int32), np.zeros(2, np.int32)], [3, 39]),
        ("int2* io) { int2 v = io[threadIdx.x]; io[threadIdx.x] = make_int2(v.y, -v.x); }",
         [np.array([1, 2, 3, 4], np.int32)], [2, -1, 4, -3]),
        ("const char4* in, int* out) { char4 c = in[threadIdx.x];"
         " out[threadIdx.x] = c.x - c.y + c.z * c.w; }",
         [np.array([1, 2, 3, 4, -5, 6, 7, 8], np.int8), np.zeros(2, np.int32)], [11, 45]),
    ],
    ids=["int4 load", "int2 load and store", "char4 load"],
)  # fmt: skip
def test_vector_loads_and_stores_run_element_by_element(source, args, want) -> None:
    """ld/st.v2/.v4 (CUDA's int2, int4, char4) expand into one access per element."""
    program = qwengpu.compile('extern "C" __global__ void k(' + source)
    qwengpu.launch(program, 1, 2, args)
    assert args[-1].tolist() == want
