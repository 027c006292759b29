"""Warp width (qwengpu/lower/warps.py): code written for CUDA's 32-lane warps is refused
on the machine's narrower warps, naming the .cu line, unless the caller opts in."""

from __future__ import annotations

import copy
import zlib

import numpy as np
import pytest

import qwengpu
from qwengpu.errors import PtxError, QgpuError, ResourceError
from qwengpu.machine.model import REDUCED_SPEC
from tests.lower.test_lower import SUITE

# CUDA gives 136 for 1..16 (the whole block is one CUDA warp); offsets 8 and 4 reach
# past the machine's 4-lane warp.
TREE_REDUCTION = """
extern "C" __global__ void tree(const int* a, int* out)
{
    int v = a[threadIdx.x];
    for (int offset = 8; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x == 0) out[0] = v;
}
"""

BALLOT = """
extern "C" __global__ void votes(const int* a, unsigned* out)
{
    unsigned b = __ballot_sync(0xffffffffu, a[threadIdx.x] > 0);
    if (threadIdx.x == 0) out[0] = b;
}
"""

# written for any warp width: warpSize strides, lane 0 of each warp adds its warp's sum
WARP_SIZE_REDUCTION = """
extern "C" __global__ void generic(const int* a, int* out)
{
    int v = a[threadIdx.x];
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x % warpSize == 0) atomicAdd(out, v);
}
"""


def _kernel_with(line: str) -> str:
    return (
        'extern "C" __global__ void k(const int* a, int* out)\n{\n'
        "    int v = a[threadIdx.x];\n"
        f"    {line}\n"
        "    out[threadIdx.x] = v;\n}\n"
    )


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ("v += __shfl_down_sync(0xffffffffu, v, 4);", "__shfl_down_sync with offset 4"),
        ("v += __shfl_up_sync(0xffffffffu, v, 16);", "__shfl_up_sync with offset 16"),
        ("v += __shfl_xor_sync(0xffffffffu, v, 8);", "__shfl_xor_sync with lane mask 8"),
        ("v += __shfl_sync(0xffffffffu, v, 5);", "__shfl_sync with source lane 5"),
        ("v += __shfl_down_sync(0xffffffffu, v, 1, 8);", "__shfl_down_sync with width 8"),
        ("v += __shfl_xor_sync(0xffu, v, 1, 4);", "__shfl_xor_sync with member mask 0xff"),
        ("v += __ballot_sync(0x1ffu, v > 0);", "__ballot_sync with member mask 0x1ff"),
        ("v += __any_sync(0x30u, v > 0);", "__any_sync with member mask 0x30"),
    ],
)
def test_an_intrinsic_reaching_past_the_warp_is_refused_at_its_cuda_line(line, what):
    with pytest.raises(PtxError) as raised:
        qwengpu.compile(_kernel_with(line), filename="warp.cu")
    message = str(raised.value)
    assert message.startswith("warp.cu:4: ") and what in message
    assert "4 lanes" in message and "--narrow-warps" in message


@pytest.mark.parametrize(
    "line",
    [
        "v += __shfl_down_sync(0xffffffffu, v, 3);",  # offsets within the 4-lane warp
        "v += __shfl_xor_sync(0xfu, v, 2, 4);",  # a mask of the warp's own lanes
        "v += __shfl_sync(0xffffffffu, v, a[4] & 3);",  # a lane only known at run time
        "v += __shfl_up_sync(0xffffffffu, v, 1, 2);",  # a width inside the warp
    ],
)
def test_intrinsics_within_the_warp_compile(line):
    qwengpu.compile(_kernel_with(line))


def test_the_same_kernel_is_refused_where_the_warp_is_narrower():
    line = "v += __shfl_down_sync(0xffffffffu, v, 2, 4);"
    qwengpu.compile(_kernel_with(line))
    with pytest.raises(PtxError, match="width 4 assumes .* warps have 2 lanes"):
        qwengpu.compile(_kernel_with(line), spec=REDUCED_SPEC)
    qwengpu.compile(_kernel_with(line), spec=REDUCED_SPEC, narrow_warps=True)


def test_the_issues_reduction_is_refused_and_runs_with_narrow_warps_on_request():
    with pytest.raises(PtxError, match="offset 8"):
        qwengpu.compile(TREE_REDUCTION)
    program = qwengpu.compile(TREE_REDUCTION, narrow_warps=True)
    out = np.zeros(1, np.int32)
    qwengpu.launch(program, 1, 16, [np.arange(1, 17, dtype=np.int32), out])
    assert out[0] == 40  # offsets 8 and 4 read the lane's own value here (docs/isa.md)


def test_a_whole_warp_intrinsic_refuses_a_block_wider_than_the_machines_warp():
    program = qwengpu.compile(BALLOT, filename="ballot.cu")
    a = np.array([1, -1, 1, 1, 1, -1, -1, 1], np.int32)
    with pytest.raises(ResourceError) as raised:
        qwengpu.launch(program, 1, 8, [a, np.zeros(1, np.uint32)])
    message = str(raised.value)
    assert message.startswith("ballot.cu:4 __ballot_sync works on the whole warp")
    assert "8 of this block's 8 threads" in message and "--narrow-warps" in message
    out = np.zeros(1, np.uint32)
    qwengpu.launch(program, 1, 4, [a[:4], out])  # one warp: CUDA's answer
    assert out[0] == 0b1101
    qwengpu.launch(qwengpu.compile(BALLOT, narrow_warps=True), 1, 8, [a, out])
    assert out[0] == 0b1101  # the machine's first warp only: CUDA's would be 0b10011101


def test_laneid_is_a_whole_warp_use():
    source = _kernel_with('unsigned l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); v += l;')
    program = qwengpu.compile(source)
    with pytest.raises(ResourceError, match="%laneid works on the whole warp"):
        qwengpu.launch(program, 1, 8, [np.zeros(8, np.int32), np.zeros(8, np.int32)])


def test_a_kernel_written_with_warpsize_runs_wide_blocks_with_cudas_answer():
    program = qwengpu.compile(WARP_SIZE_REDUCTION)
    out = np.zeros(1, np.int32)
    qwengpu.launch(program, 1, 16, [np.arange(1, 17, dtype=np.int32), out])
    assert out[0] == 136


@pytest.mark.parametrize("name", [c.name for c in SUITE.CASES])
def test_no_suite_kernel_gives_another_answer_than_cuda_on_two_lane_warps(name):
    """On the reduced preset every suite kernel is refused or gives the oracle's answer;
    with narrow_warps every one runs."""
    case = next(c for c in SUITE.CASES if c.name == name)
    source = SUITE.load_source(case)
    args = case.make_args(np.random.default_rng(zlib.crc32(name.encode())))
    oracle = case.oracle(copy.deepcopy(args))
    try:
        program = qwengpu.compile(source, case.kernel, spec=REDUCED_SPEC)
        qwengpu.launch(program, case.grid, case.block, args)  # refusals come before any run
    except QgpuError as exc:
        if "--narrow-warps" not in str(exc):
            pytest.skip(f"does not fit the reduced machine: {exc}")
        program = qwengpu.compile(source, case.kernel, spec=REDUCED_SPEC, narrow_warps=True)
        qwengpu.launch(program, case.grid, case.block, args)
        return
    for got, want in zip(args, oracle, strict=True):
        if isinstance(got, np.ndarray):
            assert np.array_equal(got, np.asarray(want).astype(got.dtype)), name
