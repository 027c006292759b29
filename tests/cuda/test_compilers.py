"""compile_cuda with real NVRTC (always), nvcc and clang (when installed); find_entry."""

from __future__ import annotations

import shutil
import tempfile

import pytest

from qwengpu.cuda import CompiledPtx, compile_cuda, compilers, find_entry, parse_ptx
from qwengpu.errors import ArgError, CompileError, CompilerNotFound, PtxError

SOURCE = """\
extern "C" __global__ void add(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + 1;
}
__global__ void scale(int* x, int k) { x[threadIdx.x] *= k; }
namespace ns {
__global__ void inner(int* x) { x[threadIdx.x] = 7; }
}
template <typename T> __global__ void fill(T* x, T v) { x[threadIdx.x] = v; }
template __global__ void fill<int>(int*, int);
template __global__ void fill<unsigned>(unsigned*, unsigned);
"""

# The intrinsics qgpu runs, for the clang path (which may use qwengpu's own prelude).
INTRINSICS = """\
extern "C" __global__ void warp(const int* in, int* out) {
    __shared__ int buf[32];
    unsigned t = threadIdx.x;
    buf[t] = in[t];
    __syncthreads();
    int v = buf[31 - t];
    v += __shfl_down_sync(0xffffffffu, v, 1);
    unsigned m = __ballot_sync(0xffffffffu, v > 3);
    v += __popc(m) + __clz(v) + (int)__brev(m) + __umulhi(m, 7u);
    atomicAdd(out, v);
    atomicMax(out + 1, v);
    atomicCAS(out + 2, 0, v);
}
"""

BAD = 'extern "C" __global__ void k(int* p) {\n  int x = 1;\n  p[0] = y;\n}\n'

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
needs_clang = pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")


@pytest.fixture(scope="module")
def nvrtc_module():
    return parse_ptx(compile_cuda(SOURCE, compiler="nvrtc").ptx)


def test_nvrtc_compiles_to_ptx():
    result = compile_cuda(SOURCE, compiler="nvrtc")
    assert isinstance(result, CompiledPtx)
    assert result.compiler == "nvrtc"
    assert ".target sm_75" in result.ptx
    assert ".visible .entry add(" in result.ptx


def test_auto_prefers_nvrtc():
    assert compile_cuda(SOURCE).compiler == "nvrtc"


def test_find_entry_extern_c_and_mangled(nvrtc_module):
    assert find_entry(nvrtc_module, "add").name == "add"
    assert find_entry(nvrtc_module, "scale").name == "_Z5scalePii"
    assert find_entry(nvrtc_module, "_Z5scalePii").name == "_Z5scalePii"
    assert find_entry(nvrtc_module, "inner").name == "_ZN2ns5innerEPi"
    assert find_entry(nvrtc_module, "ns::inner").name == "_ZN2ns5innerEPi"


def test_find_entry_ambiguous_lists_candidates(nvrtc_module):
    with pytest.raises(PtxError, match="ambiguous") as err:
        find_entry(nvrtc_module, "fill")
    assert "_Z4fillIiEvPT_S0_" in str(err.value)
    assert "_Z4fillIjEvPT_S0_" in str(err.value)
    assert find_entry(nvrtc_module, "_Z4fillIjEvPT_S0_").name == "_Z4fillIjEvPT_S0_"


def test_find_entry_missing_lists_kernels(nvrtc_module):
    with pytest.raises(PtxError, match="no kernel named 'nope'") as err:
        find_entry(nvrtc_module, "nope")
    assert "add" in str(err.value)
    assert "_Z5scalePii (scale)" in str(err.value)


def test_find_entry_ignores_device_functions():
    ptx = compile_cuda(
        "__device__ __noinline__ int helper(int a) { return a + 1; }\n"
        'extern "C" __global__ void k(int* p) { p[0] = helper(p[1]); }\n'
    ).ptx
    module = parse_ptx(ptx)
    assert not module.kernels["_Z6helperi"].is_entry
    with pytest.raises(PtxError, match="the PTX has: k$"):
        find_entry(module, "helper")


def test_nvrtc_error_has_file_and_line():
    with pytest.raises(CompileError) as err:
        compile_cuda(BAD, compiler="nvrtc")
    assert 'kernel.cu:3: error: identifier "y" is undefined' in str(err.value)


def test_error_reported_against_the_given_filename():
    with pytest.raises(CompileError, match=r"src/my_kernel\.cu:3: error"):
        compile_cuda(BAD, filename="src/my_kernel.cu")


def test_nvrtc_warnings_land_in_the_log():
    result = compile_cuda('extern "C" __global__ void k(int* p) {\n  int unused = 1;\n}\n')
    assert "kernel.cu:2: warning" in result.log


def test_arch_and_options():
    ptx = compile_cuda(SOURCE, arch="sm_80", options=["-std=c++20"]).ptx
    assert ".target sm_80" in ptx
    assert ".target sm_86" in compile_cuda(SOURCE, arch="compute_86").ptx


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown CUDA compiler"):
        compile_cuda(SOURCE, compiler="gcc")
    with pytest.raises(ValueError, match="architecture"):
        compile_cuda(SOURCE, arch="volta")
    with pytest.raises(CompileError, match="-no-such-flag|INVALID_OPTION"):
        compile_cuda(SOURCE, options=["-no-such-flag"])
    with pytest.raises(ArgError, match="the CUDA source must be text .str., got bytes"):
        compile_cuda(SOURCE.encode())
    with pytest.raises(ArgError, match="unknown CUDA compiler 'gcc'"):
        compile_cuda(SOURCE, compiler="gcc")


@needs_nvcc
def test_nvcc_compiles_and_reports_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = compile_cuda(SOURCE, compiler="nvcc")
    assert result.compiler == "nvcc"
    module = parse_ptx(result.ptx)
    assert find_entry(module, "scale").name == "_Z5scalePii"
    with pytest.raises(CompileError) as err:
        compile_cuda(BAD, compiler="nvcc")
    message = str(err.value)
    assert 'kernel.cu:3: error: identifier "y" is undefined' in message
    assert str(tmp_path) not in message
    assert list(tmp_path.iterdir()) == []  # no temp files left behind


@needs_clang
def test_clang_compiles_intrinsics_and_reports_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = compile_cuda(INTRINSICS, compiler="clang")
    assert result.compiler == "clang"
    kernel = find_entry(parse_ptx(result.ptx), "warp")
    opcodes = {ins.full_opcode for ins in kernel.body if hasattr(ins, "opcode")}
    assert {"shfl.sync.down.b32", "vote.sync.ballot.b32", "popc.b32", "bar.sync"} <= opcodes
    assert any(op.startswith("atom.global.add") for op in opcodes)
    with pytest.raises(CompileError, match=r"kernel\.cu:3:\d+: error: use of undeclared"):
        compile_cuda(BAD, compiler="clang")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def no_compilers(tmp_path, monkeypatch):
    """A machine without CUDA compilers: empty PATH, no toolkit, no NVRTC library."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(compilers, "_DEFAULT_CUDA_HOME", tmp_path / "no-cuda")
    monkeypatch.setattr(compilers, "_nvrtc_candidates", lambda: [])
    compilers._load_nvrtc.cache_clear()
    yield
    compilers._load_nvrtc.cache_clear()


def test_missing_compilers_say_how_to_get_them(no_compilers):
    with pytest.raises(CompilerNotFound, match="pip install nvidia-cuda-nvrtc"):
        compile_cuda(SOURCE, compiler="nvrtc")
    with pytest.raises(CompilerNotFound, match="apt-get install clang"):
        compile_cuda(SOURCE, compiler="clang")
    with pytest.raises(CompilerNotFound, match="nvcc not found.*CUDA toolkit"):
        compile_cuda(SOURCE, compiler="nvcc")
    with pytest.raises(CompilerNotFound, match="no CUDA compiler found") as err:
        compile_cuda(SOURCE)
    assert all(f"  {name}: " in str(err.value) for name in ("nvrtc", "clang", "nvcc"))
