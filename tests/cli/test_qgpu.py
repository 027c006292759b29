"""`qgpu` end to end: real NVRTC, real lowering, the interpreter; errors without tracebacks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qwengpu.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DOT = str(ROOT / "examples" / "dot.cu")
DOT_ARGS = ["--arg", "int32:[1,2,3]", "--arg", "int32:[4,5,6]", "--arg", "int32:[0]"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def kernel_file(tmp_path: Path, source: str, name: str = "k.cu") -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def expect_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, _out, err = run_cli(capsys, *argv)
    assert code == 1, err
    assert err.startswith("qgpu: error: ")
    assert "Traceback" not in err
    return err


def test_dot_example_prints_32(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", DOT, *DOT_ARGS, "--arg", "int32:3")
    assert code == 0
    assert "dot_param_2 = [32]" in out


def test_json_output_has_every_argument(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "run", DOT, *DOT_ARGS, "--arg", "uint32:3", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["args"] == [[1, 2, 3], [4, 5, 6], [32], 3]
    assert result["grid"] == [1, 1, 1] and result["block"] == [4, 1, 1]
    assert result["steps"] > 0


def test_compile_prints_listing_with_totals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "compile", DOT)
    assert code == 0
    assert "B0:" in out and "ROM blocks" in out and "registers" in out
    code, out, _ = run_cli(capsys, "compile", DOT, "--ptx")
    assert ".entry dot" in out


def test_cuda_syntax_error_reports_file_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = kernel_file(tmp_path, "__global__ void k(int* a) {\n  a[0] = 1 +;\n}\n", "broken.cu")
    err = expect_error(capsys, "compile", path)
    assert "broken.cu:2:" in err


def test_unsupported_ptx_instruction_names_instruction_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = (
        'extern "C" __global__ void k(int* a) {\n'
        "  int r;\n"
        '  asm("prmt.b32 %0, %1, %2, 0x3210;" : "=r"(r) : "r"(a[0]), "r"(a[1]));\n'
        "  a[0] = r;\n"
        "}\n"
    )
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert "unsupported PTX instruction 'prmt.b32'" in err
    assert "PTX line" in err


def test_float_kernel_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] *= 2.5f; }\n'
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert "floating-point" in err


def test_too_many_registers(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    loads = "\n".join(f"  int v{i} = a[{i}] * (threadIdx.x + {i});" for i in range(18))
    total = " + ".join(f"v{i} * v{(i + 1) % 18}" for i in range(18))
    source = f'extern "C" __global__ void k(int* a) {{\n{loads}\n  a[0] = {total};\n}}\n'
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert "registers at PTX line" in err and "the machine has 15" in err


def test_too_many_blocks(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    body = "\n".join(f"  if (a[{i}] > {i}) a[{i + 1}] += {i};" for i in range(40))
    source = f'extern "C" __global__ void k(int* a) {{\n{body}\n}}\n'
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert "ROM blocks" in err and "32" in err


def test_too_many_threads(capsys: pytest.CaptureFixture[str]) -> None:
    err = expect_error(capsys, "run", DOT, *DOT_ARGS, "--arg", "int32:3", "--block", "32")
    assert "32 threads" in err and "at most 16" in err


def test_arrays_that_do_not_fit_memory(capsys: pytest.CaptureFixture[str]) -> None:
    big = "int32:[" + ",".join(["1"] * 100) + "]"
    err = expect_error(
        capsys, "run", DOT, "--arg", big, "--arg", big, "--arg", "int32:[0]", "--arg", "int32:3"
    )
    assert "words" in err and "126" in err


def test_runaway_loop_hits_the_step_budget(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = 'extern "C" __global__ void k(volatile int* a) { while (a[0] == 0) { a[1]++; } }\n'
    err = expect_error(
        capsys, "run", kernel_file(tmp_path, source), "--arg", "int32:[0,0]", "--max-steps", "200"
    )
    assert "step budget of 200" in err
    assert "a runaway loop? raise the budget with --max-steps" in err  # no lane waits


LOCK = """extern "C" __global__ void lock(int* mutex, int* out)
{
    while (atomicCAS(mutex, 0, 1) != 0) { }
    out[0] += 1;
    atomicExch(mutex, 0);
}
"""


def test_a_lock_taken_inside_a_warp_is_named_when_the_budget_runs_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The lane that took the lock waits at the block after the loop while its warp-mate
    spins (pre-Volta SIMT): the message says so instead of only "a runaway loop"."""
    path = kernel_file(tmp_path, LOCK)
    err = expect_error(
        capsys, "run", path, "--arg", "int32:[0]", "--arg", "int32:[0]", "--block", "2",
        "--max-steps", "200",
    )  # fmt: skip
    assert re.search(r"in warp 0, lane 1 loops while lane 0 waits at B\d+: if they wait on", err)
    assert "raise the budget with --max-steps" in err and len(err.strip().splitlines()) == 1


def test_out_of_range_access_traps(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = 'extern "C" __global__ void k(int* a) { a[threadIdx.x * 1000] = 1; }\n'
    err = expect_error(capsys, "run", kernel_file(tmp_path, source), "--arg", "int32:[0]")
    assert "illegal address" in err and "outside memory" in err and "PTX line" in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("int32:[1,2", "neither an integer nor a [list]"),
        ("float32:[1]", "unknown type 'float32'"),
        ("int32", "expected TYPE:VALUE"),
        ('int32:[1,"x"]', "is not an integer"),
        ("int8:[300]", "out of range for int8"),
        ("int32:4294967295", "out of range for int32"),
        ("int8:5", "scalar arguments are int32 or uint32"),
        ("int32:[]", "at least one element"),
    ],
)
def test_malformed_arg_specs(capsys: pytest.CaptureFixture[str], spec: str, message: str) -> None:
    err = expect_error(capsys, "run", DOT, "--arg", spec)
    assert message in err
    assert "--arg #1" in err


def test_wrong_argument_count_and_kind(capsys: pytest.CaptureFixture[str]) -> None:
    err = expect_error(capsys, "run", DOT, *DOT_ARGS)
    assert "takes 4 arguments" in err and "got 3" in err
    err = expect_error(capsys, "run", DOT, *DOT_ARGS, "--arg", "int32:[3]")
    assert "scalar param; got an array" in err
    err = expect_error(
        capsys,
        "run",
        DOT,
        "--arg",
        "int32:1",
        "--arg",
        "int32:[4,5,6]",
        "--arg",
        "int32:[0]",
        "--arg",
        "int32:3",
    )
    assert "must be an array" in err


def test_bad_grid_and_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    err = expect_error(capsys, "run", DOT, "--grid", "0")
    assert "--grid" in err
    err = expect_error(capsys, "run", "does/not/exist.cu")
    assert "cannot read" in err


def test_a_source_that_is_not_utf8_is_named_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "latin1.cu"
    path.write_bytes(Path(DOT).read_bytes().replace(b"// The", b"// Th\xe9"))
    for command in ("run", "compile"):
        err = expect_error(capsys, command, str(path))
        assert f"{path} is not UTF-8 text (byte 5: 0xe9)" in err
        assert len(err.strip().splitlines()) == 1


def test_a_source_without_a_kernel_says_how_to_write_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = kernel_file(tmp_path, "__device__ int twice(int x) { return 2 * x; }\n")
    err = expect_error(capsys, "compile", path)
    assert 'defines no kernel: write one as extern "C" __global__' in err
    two = 'extern "C" __global__ void a(int* p) { *p = 1; }\n'
    two += 'extern "C" __global__ void b(int* p) { *p = 2; }\n'
    err = expect_error(capsys, "compile", kernel_file(tmp_path, two, "two.cu"))
    assert "defines 2 kernels (a, b); name one (--kernel NAME)" in err


def test_trace_prints_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_cli(capsys, "run", DOT, *DOT_ARGS, "--arg", "int32:3", "--trace")
    assert code == 0
    steps = [line for line in err.splitlines() if line.startswith("#")]
    assert steps[0].startswith("#0 cta0 w0 B0 lanes[0,1,2,3]")
    assert any("mem[" in line for line in steps)  # the atomic's writes


def test_inspect_prints_the_reduced_machine_layer_map(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "inspect", "--geometry", "0.8b")
    assert code == 0
    header = out.splitlines()[0]
    assert header.startswith("qgpu machine on qwen3.5-0.8b: 27 layers used")
    assert "2-lane warps x 8 warps/CTA" in header and "ROM 128 blocks x 2 instructions" in header
    assert "register file" in out and "output amplifier" in out


def test_inspect_refuses_an_unknown_geometry(capsys: pytest.CaptureFixture[str]) -> None:
    err = expect_error(capsys, "inspect", "--geometry", "7b")
    assert "--geometry 7b" in err and "0.8b" in err


@pytest.mark.parametrize("steps", ["0", "-3", "many"])
def test_a_step_budget_below_one_is_refused(capsys: pytest.CaptureFixture[str], steps: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "examples/dot.cu", "--max-steps", steps])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("qgpu run: error: argument --max-steps: ") and "Traceback" not in err


def test_ctrl_c_is_one_line_and_exit_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import qwengpu.cli.main as cli

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "compile_cuda", interrupted)
    code, _out, err = run_cli(capsys, "run", DOT, *DOT_ARGS, "--arg", "int32:3")
    assert code == 130 and err.strip() == "qgpu: interrupted" and "Traceback" not in err


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ('    printf("%d\\n", a[0]);', 4, "printf is not supported: the machine has no host"),
        ("    int* p = (int*)malloc(16);\n    p[0] = 1;\n    a[0] = p[0];", 4,
         "device malloc is not supported: the machine has no heap"),
        ("    a[0] = twice(a[1]);", 4, "a call to 'twice' is not supported: device functions must"),
    ],
    ids=["printf", "malloc", "noinline"],
)  # fmt: skip
def test_a_call_is_named_by_its_cuda_construct_and_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, line: int, message: str
) -> None:
    source = "__device__ __noinline__ int twice(int x) { return 2 * x; }\n"
    source += 'extern "C" __global__ void k(int* a)\n{\n' + body + "\n}\n"
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert err.startswith(f"qgpu: error: k.cu:{line}: PTX line ") and message in err


def test_an_unsupported_instruction_names_its_cuda_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = 'extern "C" __global__ void k(float* a)\n{\n    a[threadIdx.x] = a[0] * 2.5f;\n}\n'
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert err.startswith("qgpu: error: k.cu:3: PTX line ") and "floating-point" in err


@pytest.mark.parametrize(
    ("param", "body", "line", "message"),
    [
        ("cudaTextureObject_t t", "a[threadIdx.x] = tex1Dfetch<int>(t, threadIdx.x);", 3,
         "textures are not supported: the machine has no texture unit"),
        ("cudaSurfaceObject_t s", "int v;\n    surf1Dread(&v, s, 4);\n    a[0] = v;", 4,
         "surfaces are not supported"),
    ],
    ids=["texture", "surface"],
)  # fmt: skip
def test_textures_are_named_at_the_kernels_line_not_the_headers(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    param: str,
    body: str,
    line: int,
    message: str,
) -> None:
    source = f'extern "C" __global__ void k({param}, int* a)\n{{\n    {body}\n}}\n'
    err = expect_error(capsys, "compile", kernel_file(tmp_path, source))
    assert err.startswith(f"qgpu: error: k.cu:{line}: PTX line ") and message in err


TEMPLATE = """template <typename T>
__global__ void reduce0(const T* in, T* out, int n)
{
    T sum = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        sum += in[i];
    atomicAdd(out, sum);
}
"""


def test_a_template_kernel_runs_by_its_instance_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`--kernel 'reduce0<int>'`: NVRTC instantiates it by name (no explicit instantiation
    in the source) and the run finds its mangled PTX name."""
    path = kernel_file(tmp_path, TEMPLATE)
    args = ["--arg", "int32:[1,2,3,4,5]", "--arg", "int32:[0]", "--arg", "int32:5"]
    code, out, err = run_cli(capsys, "run", path, "--kernel", "reduce0<int>", *args)
    assert code == 0, err
    assert out.splitlines()[1].endswith("= [15]")
    unsigned = ["--arg", "uint32:[7,8]", "--arg", "uint32:[0]", "--arg", "int32:2"]
    code, out, err = run_cli(capsys, "run", path, "--kernel", "reduce0<unsigned int>", *unsigned)
    assert code == 0 and out.splitlines()[1].endswith("= [15]"), err
    err = expect_error(capsys, "run", path, "--kernel", "reduce9<int>", *args)
    assert "k.cu: 'reduce9<int>' names no kernel of the source (identifier" in err


@pytest.mark.parametrize(
    "signature",
    ["int2 p, int* out", "P p, int* out"],
    ids=["int2", "struct"],
)
def test_a_struct_passed_by_value_is_refused_not_misread(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, signature: str
) -> None:
    """An 8-byte aggregate param used to be laid out as a pointer word, and the kernel read
    the next param's slot as its second field (a wrong value, exit 0): refused instead."""
    source = "struct P { int a, b; };\n"
    source += f'extern "C" __global__ void k({signature}) {{ out[0] = p.x * 10 + p.y; }}\n'
    source = source.replace("p.x", "p.a").replace("p.y", "p.b") if "P p" in signature else source
    err = expect_error(
        capsys, "run", kernel_file(tmp_path, source), "--arg", "int32:[1,2]", "--arg", "int32:[0]"
    )
    assert "param #1 ('k_param_0') is a struct or vector passed by value (8 bytes)" in err


def test_warp_code_for_wider_warps_is_refused_unless_narrow_warps_is_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = (
        'extern "C" __global__ void k(const int* a, int* out)\n{\n'
        "    int v = a[threadIdx.x];\n"
        "    v += __shfl_down_sync(0xffffffffu, v, 1);\n"
        "    out[threadIdx.x] = v;\n}\n"
    )
    path = kernel_file(tmp_path, source, "warp.cu")
    args = ["--block", "8", "--arg", "int32:[1,2,3,4,5,6,7,8]", "--arg", "int32:[0,0,0,0,0,0,0,0]"]
    err = expect_error(capsys, "run", path, *args)
    assert err.startswith("qgpu: error: warp.cu:4 __shfl_down_sync works on the whole warp")
    code, out, _ = run_cli(capsys, "run", path, *args, "--narrow-warps")
    assert code == 0
    assert "[3, 5, 7, 8, 11, 13, 15, 16]" in out  # two 4-lane warps: lane 3 reads itself
