"""Launch geometry as the API takes it: ints only, never reinterpreted (issue: a string
"12" ran as (1, 2, 1), a float 2.7 as 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qwengpu import api
from qwengpu.errors import ArgError, ResourceError
from qwengpu.host.launch import dim3

DOT = (Path(__file__).resolve().parents[2] / "examples" / "dot.cu").read_text()


@pytest.mark.parametrize(
    ("value", "want"),
    [(4, (4, 1, 1)), ((2, 3), (2, 3, 1)), ([1, 2, 3], (1, 2, 3)), (np.int64(8), (8, 1, 1)),
     (np.array([2, 2]), (2, 2, 1))],
)  # fmt: skip
def test_ints_and_sequences_of_ints_are_dimensions(value, want):
    assert dim3(value, "block") == want


@pytest.mark.parametrize("value", ["12", b"4", 4.0, (2.7,), None, True, (1, "2"), (), (1,) * 4])
def test_anything_else_is_refused_in_one_line(value):
    with pytest.raises(ArgError, match=r"^block must "):
        dim3(value, "block")


def test_the_api_refuses_a_string_block_before_the_launch():
    program = api.compile(DOT)
    args = [np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32)]
    args += [np.zeros(1, np.int32), np.int32(3)]
    with pytest.raises(ArgError, match=r"block must be an int or 1 to 3 ints, got '12'"):
        api.launch(program, 1, "12", args)
    assert int(args[2][0]) == 0  # nothing ran
    api.launch(program, 1, (4,), args)
    assert int(args[2][0]) == 32


def test_a_read_only_array_is_refused_before_the_launch_numbered_as_the_cli_does():
    """The results go back into the caller's arrays: a read-only one would fail after the
    launch ran; it is refused first, numbered from 1 as `--arg #N` is."""
    program = api.compile(DOT)
    frozen = np.zeros(1, np.int32)
    frozen.flags.writeable = False
    args = [np.array([1, 2, 3], np.int32), np.array([4, 5, 6], np.int32), frozen, np.int32(3)]
    with pytest.raises(ArgError, match=r"argument #3 \('dot_param_2'\) is a read-only array"):
        api.launch(program, 1, 4, args)


STENCIL = """extern "C" __global__ void stencil(const int* in, int* out, int n)
{
    int i = threadIdx.x;
    if (i < n)
        out[i] = in[i - 1] + in[i] + in[i + 1];
}
"""


def test_a_pointer_into_an_array_reads_before_it():
    """`qwengpu.at(a, 1)` is `d_in + 1`: the kernel reads in[-1] (the array's first
    element), as cuda-samples' stencils do with RADIUS."""
    import qwengpu

    program = api.compile(STENCIL)
    data = np.array([1, 2, 3, 4, 5, 6], np.int32)
    out = np.zeros(4, np.int32)
    qwengpu.launch(program, 1, 4, [qwengpu.at(data, 1), out, np.int32(4)])
    assert out.tolist() == [6, 9, 12, 15]
    with pytest.raises(ArgError, match="offset 7 is outside the array's 6 elements"):
        qwengpu.at(data, 7)


def test_the_cli_takes_a_pointer_offset(capsys, tmp_path):
    from qwengpu.cli.main import main

    path = tmp_path / "stencil.cu"
    path.write_text(STENCIL)
    args = ["--arg", "int32:[1,2,3,4,5,6]+1", "--arg", "int32:[0,0,0,0]", "--arg", "int32:4"]
    assert main(["run", str(path), *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "stencil_param_0 = [1, 2, 3, 4, 5, 6]"
    assert lines[1] == "stencil_param_1 = [6, 9, 12, 15]"
    assert main(["run", str(path), "--arg", "int32:[1,2]+3", *args[2:]]) == 1
    assert "offset 3 is outside the array's 2 elements" in capsys.readouterr().err


# dynamic shared memory after a static array: both start zeroed, the extern one where the
# static one ends (aligned), the arrays after both
DYNAMIC_SHARED = """
extern "C" __global__ void rev(const int* in, int* out, int n)
{
    __shared__ int fixed[3];
    extern __shared__ int s[];
    int t = threadIdx.x;
    if (t < 3) fixed[t] = t + 100;
    if (t < n) s[t] = in[t];
    __syncthreads();
    if (t < n) out[t] = s[n - 1 - t] + fixed[t % 3];
}
"""


def _rev_args():
    return [np.arange(1, 9, dtype=np.int32), np.zeros(8, np.int32), np.int32(8)]


def test_dynamic_shared_memory_takes_its_size_at_launch():
    """`extern __shared__` as CUDA's third launch parameter gives it: in the API, in
    RawKernel (CuPy's shared_mem=) and on the model (tests/machine: the suite's runner)."""
    args = _rev_args()
    api.launch(api.compile(DYNAMIC_SHARED), 1, 8, args, shared_mem=8 * 4)
    assert args[1].tolist() == [
        8 + 100,
        7 + 101,
        6 + 102,
        5 + 100,
        4 + 101,
        3 + 102,
        2 + 100,
        1 + 101,
    ]
    again = _rev_args()
    api.RawKernel(DYNAMIC_SHARED, "rev")((1,), (8,), again, shared_mem=32)
    assert again[1].tolist() == args[1].tolist()


@pytest.mark.parametrize(
    ("shared_mem", "error", "match"),
    [
        (0, ArgError, "declares extern __shared__ memory, but the launch gives it 0 bytes"),
        (-4, ArgError, "must be 0 or more bytes"),
        (2.5, ArgError, "must be a number of bytes"),
        (4096, ResourceError, r"shared_mem 4096 bytes \(1024 words\): only \d+ of"),
    ],
)
def test_a_bad_shared_mem_is_refused_before_the_launch(shared_mem, error, match):
    args = _rev_args()
    with pytest.raises(error, match=match):
        api.launch(api.compile(DYNAMIC_SHARED), 1, 8, args, shared_mem=shared_mem)
    assert not args[1].any()
