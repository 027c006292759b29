"""CUDA C++ -> PTX with whichever compiler is at hand, and kernel lookup in the result.

NVRTC (the `nvidia-cuda-nvrtc` wheel, loaded through ctypes) is the primary path: it
needs neither a GPU nor a CUDA toolkit. clang and nvcc are alternatives for machines
that have them. Every path reports errors the same way, `file:line: message`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qwengpu.cuda.ptx_ir import Kernel, Module
from qwengpu.errors import ArgError, CompileError, CompilerNotFound, PtxError

COMPILERS = ("nvrtc", "clang", "nvcc")
_DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


@dataclass(frozen=True)
class CompiledPtx:
    """PTX text and how it was made; `log` keeps the warnings for the caller to show."""

    ptx: str
    compiler: str  # the compiler that produced it: "nvrtc", "clang" or "nvcc"
    log: str  # the compiler's messages (warnings), normalised like errors
    lowered: dict[str, str] = field(default_factory=dict)
    """Each name expression asked for (`reduce0<int>`) -> its PTX name (NVRTC only)."""


def compile_cuda(
    source: str,
    *,
    filename: str = "kernel.cu",
    compiler: str = "auto",
    arch: str = "sm_75",
    options: Sequence[str] = (),
    names: Sequence[str] = (),
) -> CompiledPtx:
    """Compile CUDA C++ `source` to PTX text.

    `compiler` is "nvrtc", "clang", "nvcc" or "auto" (the first of those that is
    installed). `options` go to the compiler verbatim, after qwengpu's own. `filename`
    is only the name compile errors are reported against. `names`: kernels by C++ name
    expression (`reduce0<int>`, `ns::k`), which NVRTC instantiates and whose PTX names
    it reports in `lowered`.
    """
    if not isinstance(source, str):
        raise ArgError(f"the CUDA source must be text (str), got {type(source).__name__}")
    if compiler != "auto" and compiler not in COMPILERS:
        raise ArgError(f"unknown CUDA compiler {compiler!r}; use auto, {', '.join(COMPILERS)}")
    cc = _compute_capability(arch)
    opts = list(options)
    if compiler == "nvrtc" or (compiler == "auto" and names):
        return _compile_nvrtc(source, filename, cc, opts, names)
    if compiler != "auto":
        return _BACKENDS[compiler](source, filename, cc, opts)
    missing = []
    for name in COMPILERS:
        try:
            return _BACKENDS[name](source, filename, cc, opts)
        except CompilerNotFound as e:
            missing.append(f"  {name}: {e}")
    raise CompilerNotFound("no CUDA compiler found:\n" + "\n".join(missing))


def _compute_capability(arch: str) -> str:
    """'sm_75', 'compute_75' or '75' -> '75' (keeping an 'a'/'f' feature suffix)."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3}[af]?)", arch.strip())
    if not m:
        raise ArgError(f"bad GPU architecture {arch!r}; expected e.g. sm_75")
    return m.group(1)


def _with_default_std(options: list[str]) -> list[str]:
    """C++17 unless the caller chose a standard."""
    if any(o.startswith(("-std", "--std")) for o in options):
        return options
    return ["-std=c++17", *options]


def _normalise_log(log: str, renames: dict[str, str]) -> str:
    """Report against the user's names, and turn EDG's `file(12): ` into `file:12: `."""
    for path, shown in renames.items():
        log = log.replace(path, shown)
    log = re.sub(r"(?m)^([^\s(][^\n(]*?)\((\d+)\): ", r"\1:\2: ", log)
    return log.strip()


def _cuda_homes() -> list[Path]:
    """CUDA toolkit roots to look in, most specific first."""
    homes = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    homes.append(_DEFAULT_CUDA_HOME)
    return [h for h in homes if h.is_dir()]


# --------------------------------------------------------------------------- NVRTC

_NVRTC_SUCCESS = 0


def _nvrtc_candidates() -> list[str]:
    """Where libnvrtc may live: the pip wheel, a CUDA toolkit, the system loader path."""
    found: list[str] = []
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels

        for root in nvidia.__path__:
            libs = Path(root).glob("*/lib/libnvrtc*.so*")
            main = (p for p in libs if "builtins" not in p.name)
            found += [str(p) for p in sorted(main, key=lambda p: (".alt." in p.name, p.name))]
    except ImportError:
        pass
    for home in _cuda_homes():
        found += [str(p) for p in (home / "lib64" / "libnvrtc.so", home / "lib" / "libnvrtc.so")]
    system = ctypes.util.find_library("nvrtc")
    if system:
        found.append(system)
    return found


@functools.cache
def _load_nvrtc() -> ctypes.CDLL:
    """Load libnvrtc once; CompilerNotFound when no candidate loads."""
    tried = []
    for path in _nvrtc_candidates():
        try:
            _preload_builtins(Path(path).parent)
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
            continue
        _declare_nvrtc(lib)
        return lib
    detail = ("; tried " + "; ".join(tried)) if tried else ""
    raise CompilerNotFound(
        "NVRTC (libnvrtc) not found: install the nvidia-cuda-nvrtc pip package "
        "(`pip install nvidia-cuda-nvrtc`) or set CUDA_HOME to a CUDA toolkit with "
        f"lib64/libnvrtc.so{detail}"
    )


def _preload_builtins(lib_dir: Path) -> None:
    """NVRTC dlopens libnvrtc-builtins by its bare name at compile time, and the wheel's
    libnvrtc has no RPATH: load the builtins beside it first so that name resolves."""
    for builtins in sorted(lib_dir.glob("libnvrtc-builtins.so*")):
        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)


def _declare_nvrtc(lib: ctypes.CDLL) -> None:
    """ctypes signatures of the NVRTC calls we make (nvrtc.h)."""
    p, sz, cstr = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p
    argv = ctypes.POINTER(ctypes.c_char_p)
    sigs = {
        "nvrtcCreateProgram": [ctypes.POINTER(p), cstr, cstr, ctypes.c_int, argv, argv],
        "nvrtcCompileProgram": [p, ctypes.c_int, argv],
        "nvrtcGetPTXSize": [p, sz],
        "nvrtcGetPTX": [p, ctypes.c_char_p],
        "nvrtcGetProgramLogSize": [p, sz],
        "nvrtcGetProgramLog": [p, ctypes.c_char_p],
        "nvrtcDestroyProgram": [ctypes.POINTER(p)],
        "nvrtcAddNameExpression": [p, cstr],
        "nvrtcGetLoweredName": [p, cstr, ctypes.POINTER(cstr)],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], cstr


def _nvrtc_text(lib: ctypes.CDLL, prog: ctypes.c_void_p, what: str) -> str:
    """Read the PTX or the log of `prog` (`what` is "PTX" or "ProgramLog")."""
    size = ctypes.c_size_t()
    getattr(lib, f"nvrtcGet{what}Size")(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    getattr(lib, f"nvrtcGet{what}")(prog, buf)
    return buf.value.decode(errors="replace")


NAME_MAP = "__nv_name_map"
"""The pseudo-file NVRTC reports a bad name expression's errors against."""


def _compile_nvrtc(
    source: str, filename: str, cc: str, options: list[str], names: Sequence[str] = ()
) -> CompiledPtx:
    lib = _load_nvrtc()
    # -lineinfo: .loc directives, so the lowering's errors can name the CUDA line
    opts = [f"-arch=compute_{cc}", "-lineinfo", *_with_default_std(options)]
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(
        ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None
    )
    if rc != _NVRTC_SUCCESS:
        raise CompileError(f"NVRTC could not create a program: {_nvrtc_error(lib, rc)}")
    try:
        for name in names:  # instantiated (templates) and named by NVRTC
            lib.nvrtcAddNameExpression(prog, name.encode())
        argv = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
        log = _normalise_log(_nvrtc_text(lib, prog, "ProgramLog"), {})
        if rc != _NVRTC_SUCCESS and NAME_MAP in log:  # a name expression's own error
            reason = log.split("error: ", 1)[-1].splitlines()[0].strip()
            asked = ", ".join(repr(n) for n in names)
            raise CompileError(f"{filename}: {asked} names no kernel of the source ({reason})")
        if rc != _NVRTC_SUCCESS:
            raise CompileError(log or f"NVRTC failed: {_nvrtc_error(lib, rc)}")
        lowered = {}
        for name in names:
            found = ctypes.c_char_p()
            rc = lib.nvrtcGetLoweredName(prog, name.encode(), ctypes.byref(found))
            if rc != _NVRTC_SUCCESS or not found.value:
                raise CompileError(f"{filename}: no kernel {name!r} in the source")
            lowered[name] = found.value.decode()
        return CompiledPtx(_nvrtc_text(lib, prog, "PTX"), "nvrtc", log, lowered)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _nvrtc_error(lib: ctypes.CDLL, rc: int) -> str:
    return f"{lib.nvrtcGetErrorString(rc).decode()} ({rc})"


# --------------------------------------------------------------------------- nvcc / clang


def _run(argv: list[str], tmp: str, out: Path, renames: dict[str, str]) -> tuple[str | None, str]:
    """Run a compiler command in `tmp`; (the PTX in `out` or None, the normalised log)."""
    env = {**os.environ, "TMPDIR": tmp}  # the compilers' own scratch files die with tmp
    try:
        res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
    except OSError as e:
        raise CompilerNotFound(f"could not run {argv[0]}: {e}") from e
    log = _normalise_log(res.stdout + res.stderr, renames)
    if res.returncode != 0 or not out.exists():
        return None, log
    return out.read_text(), log


def _find_nvcc() -> str:
    found = [shutil.which("nvcc")]
    found += [shutil.which("nvcc", path=str(home / "bin")) for home in _cuda_homes()]
    exe = next((f for f in found if f), None)
    if exe is None:
        raise CompilerNotFound(
            "nvcc not found on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin: install "
            "the CUDA toolkit (NVIDIA's cuda-toolkit packages, or `apt-get install "
            "nvidia-cuda-toolkit`) or set CUDA_HOME"
        )
    return exe


def _compile_nvcc(source: str, filename: str, cc: str, options: list[str]) -> CompiledPtx:
    exe = _find_nvcc()
    with tempfile.TemporaryDirectory(prefix="qgpu-nvcc-") as tmp:
        src, out = Path(tmp, Path(filename).name), Path(tmp, "out.ptx")
        src.write_text(source)
        argv = [exe, "-ptx", f"-arch=compute_{cc}", "-lineinfo", *_with_default_std(options)]
        ptx, log = _run([*argv, "-o", str(out), str(src)], tmp, out, {str(src): filename})
    if ptx is None:
        raise CompileError(log or f"nvcc failed on {filename}")
    return CompiledPtx(ptx, "nvcc", log)


# Device-side declarations clang needs when it cannot use the CUDA toolkit's headers
# (-nocudainc): the execution-space attributes and the integer intrinsics qgpu runs.
_CLANG_PRELUDE = r"""
#pragma once
#include <__clang_cuda_builtin_vars.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __QD static __device__ __inline__ __attribute__((always_inline))
__QD void __syncwarp(unsigned m = 0xffffffffu) { __nvvm_bar_warp_sync(m); }
__QD int __syncthreads_count(int p) { return __nvvm_bar0_popc(p); }
__QD int __syncthreads_and(int p) { return __nvvm_bar0_and(p); }
__QD int __syncthreads_or(int p) { return __nvvm_bar0_or(p); }
__QD void __threadfence() { __nvvm_membar_gl(); }
__QD void __threadfence_block() { __nvvm_membar_cta(); }
__QD void __threadfence_system() { __nvvm_membar_sys(); }
__QD long long clock64() { return __nvvm_read_ptx_sreg_clock64(); }
__QD void __trap() { __asm__ __volatile__("trap;"); }
__QD unsigned __activemask() {
  unsigned m; __asm__ __volatile__("activemask.b32 %0;" : "=r"(m)); return m;
}
__QD unsigned __ballot_sync(unsigned m, int p) { return __nvvm_vote_ballot_sync(m, p); }
__QD int __all_sync(unsigned m, int p) { return __nvvm_vote_all_sync(m, p); }
__QD int __any_sync(unsigned m, int p) { return __nvvm_vote_any_sync(m, p); }
__QD int __uni_sync(unsigned m, int p) { return __nvvm_vote_uni_sync(m, p); }
#define __QSHFL(F, B, C, T) \
  __QD int F(unsigned m, int v, T o, int w = 32) { return B(m, v, o, ((32 - w) << 8) | C); } \
  __QD unsigned F(unsigned m, unsigned v, T o, int w = 32) { \
    return (unsigned)B(m, (int)v, o, ((32 - w) << 8) | C); } \
  __QD long long F(unsigned m, long long v, T o, int w = 32) { \
    unsigned long long hi = (unsigned)F(m, (int)(v >> 32), o, w); \
    return (long long)(hi << 32 | (unsigned)F(m, (int)v, o, w)); } \
  __QD unsigned long long F(unsigned m, unsigned long long v, T o, int w = 32) { \
    return (unsigned long long)F(m, (long long)v, o, w); } \
  __QD long F(unsigned m, long v, T o, int w = 32) { return (long)F(m, (long long)v, o, w); } \
  __QD unsigned long F(unsigned m, unsigned long v, T o, int w = 32) { \
    return (unsigned long)F(m, (long long)v, o, w); }
__QSHFL(__shfl_sync, __nvvm_shfl_sync_idx_i32, 0x1f, int)
__QSHFL(__shfl_up_sync, __nvvm_shfl_sync_up_i32, 0, unsigned)
__QSHFL(__shfl_down_sync, __nvvm_shfl_sync_down_i32, 0x1f, unsigned)
__QSHFL(__shfl_xor_sync, __nvvm_shfl_sync_bfly_i32, 0x1f, int)
__QD int __popc(unsigned x) { return __builtin_popcount(x); }
__QD int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__QD int __clz(int x) { return x ? __builtin_clz(x) : 32; }
__QD int __clzll(long long x) { return x ? __builtin_clzll(x) : 64; }
__QD unsigned __brev(unsigned x) { return __builtin_bitreverse32(x); }
__QD unsigned long long __brevll(unsigned long long x) { return __builtin_bitreverse64(x); }
__QD int __ffs(int x) { return __builtin_ffs(x); }
__QD int __ffsll(long long x) { return __builtin_ffsll(x); }
__QD int __mulhi(int a, int b) { return __nvvm_mulhi_i(a, b); }
__QD unsigned __umulhi(unsigned a, unsigned b) { return __nvvm_mulhi_ui(a, b); }
__QD long long __mul64hi(long long a, long long b) { return __nvvm_mulhi_ll(a, b); }
__QD unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return __nvvm_mulhi_ull(a, b);
}
__QD int __mul24(int a, int b) { return __nvvm_mul24_i(a, b); }
__QD unsigned __umul24(unsigned a, unsigned b) { return __nvvm_mul24_ui(a, b); }
#define __QVEC(T, N, A2, A4) \
  struct __attribute__((aligned(A2))) N##2 { T x, y; }; \
  struct N##3 { T x, y, z; }; \
  struct __attribute__((aligned(A4))) N##4 { T x, y, z, w; }; \
  __QD N##2 make_##N##2(T x, T y) { return N##2{x, y}; } \
  __QD N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; } \
  __QD N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
__QVEC(signed char, char, 2, 4) __QVEC(unsigned char, uchar, 2, 4)
__QVEC(short, short, 4, 8) __QVEC(unsigned short, ushort, 4, 8)
__QVEC(int, int, 8, 16) __QVEC(unsigned, uint, 8, 16)
__QVEC(long long, longlong, 16, 16) __QVEC(unsigned long long, ulonglong, 16, 16)
#define __QMINMAX(T) \
  __QD T min(T a, T b) { return a < b ? a : b; } \
  __QD T max(T a, T b) { return a > b ? a : b; }
__QMINMAX(int) __QMINMAX(unsigned) __QMINMAX(long long) __QMINMAX(unsigned long long)
__QD unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
__QD unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
__QD unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
__QD unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
__QD unsigned umin(unsigned a, unsigned b) { return min(a, b); }
__QD unsigned umax(unsigned a, unsigned b) { return max(a, b); }
__QD long long llmin(long long a, long long b) { return min(a, b); }
__QD long long llmax(long long a, long long b) { return max(a, b); }
__QD unsigned long long ullmin(unsigned long long a, unsigned long long b) { return min(a, b); }
__QD unsigned long long ullmax(unsigned long long a, unsigned long long b) { return max(a, b); }
__QD int abs(int a) { return a < 0 ? -a : a; }
__QD long labs(long a) { return a < 0 ? -a : a; }
__QD long long llabs(long long a) { return a < 0 ? -a : a; }
#define __QATOM(F, T, B, C) __QD T F(T* p, T v) { return (T)B((C*)p, (C)v); }
#define __QATOM3(F, B32, B64) __QATOM(F, int, B32, int) \
  __QATOM(F, unsigned, B32, int) __QATOM(F, unsigned long long, B64, long long)
__QATOM3(atomicAdd, __nvvm_atom_add_gen_i, __nvvm_atom_add_gen_ll)
__QATOM3(atomicExch, __nvvm_atom_xchg_gen_i, __nvvm_atom_xchg_gen_ll)
__QATOM3(atomicAnd, __nvvm_atom_and_gen_i, __nvvm_atom_and_gen_ll)
__QATOM3(atomicOr, __nvvm_atom_or_gen_i, __nvvm_atom_or_gen_ll)
__QATOM3(atomicXor, __nvvm_atom_xor_gen_i, __nvvm_atom_xor_gen_ll)
__QATOM(atomicMin, int, __nvvm_atom_min_gen_i, int)
__QATOM(atomicMin, unsigned, __nvvm_atom_min_gen_ui, unsigned)
__QATOM(atomicMin, long long, __nvvm_atom_min_gen_ll, long long)
__QATOM(atomicMin, unsigned long long, __nvvm_atom_min_gen_ull, unsigned long long)
__QATOM(atomicMax, int, __nvvm_atom_max_gen_i, int)
__QATOM(atomicMax, unsigned, __nvvm_atom_max_gen_ui, unsigned)
__QATOM(atomicMax, long long, __nvvm_atom_max_gen_ll, long long)
__QATOM(atomicMax, unsigned long long, __nvvm_atom_max_gen_ull, unsigned long long)
__QATOM(atomicInc, unsigned, __nvvm_atom_inc_gen_ui, unsigned)
__QATOM(atomicDec, unsigned, __nvvm_atom_dec_gen_ui, unsigned)
__QD int atomicSub(int* p, int v) { return __nvvm_atom_add_gen_i(p, -v); }
__QD unsigned atomicSub(unsigned* p, unsigned v) {
  return (unsigned)__nvvm_atom_add_gen_i((int*)p, -(int)v);
}
__QD int atomicCAS(int* p, int c, int v) { return __nvvm_atom_cas_gen_i(p, c, v); }
__QD unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) {
  return (unsigned)__nvvm_atom_cas_gen_i((int*)p, (int)c, (int)v);
}
__QD unsigned long long atomicCAS(unsigned long long* p, unsigned long long c,
                                  unsigned long long v) {
  return (unsigned long long)__nvvm_atom_cas_gen_ll((long long*)p, c, v);
}
"""

# Lowest PTX ISA version clang must target for the prelude's *_sync builtins on an arch.
_CLANG_PTX_FOR_ARCH = {80: 70, 86: 71, 87: 74, 89: 78, 90: 78}


def _clang_ptx_feature(cc: str) -> str:
    major = int(cc.rstrip("af"))
    ptx = max([64] + [v for a, v in _CLANG_PTX_FOR_ARCH.items() if a <= major])
    return f"+ptx{ptx}"


def _compile_clang(source: str, filename: str, cc: str, options: list[str]) -> CompiledPtx:
    exe = shutil.which("clang")
    if not exe:
        raise CompilerNotFound(
            "clang not found on PATH: install it (`apt-get install clang`, or your "
            "platform's LLVM/clang package)"
        )
    homes = _cuda_homes()
    with tempfile.TemporaryDirectory(prefix="qgpu-clang-") as tmp:
        src, out = Path(tmp, Path(filename).name), Path(tmp, "out.ptx")
        src.write_text(source)
        base = [exe, "-x", "cuda", "--cuda-device-only", f"--cuda-gpu-arch=sm_{cc}"]
        base += ["-nocudalib", "-O3", *_with_default_std(options)]
        tail = ["-S", "-o", str(out), str(src)]
        prelude = Path(tmp, "qgpu_cuda_prelude.h")
        renames = {str(src): filename, str(prelude): prelude.name}
        note = ""
        if homes:
            ptx, log = _run([*base, f"--cuda-path={homes[0]}", *tail], tmp, out, renames)
            if ptx is not None or _mentions(log, filename):
                return _clang_result(ptx, log)
            note = (
                f"note: clang could not use the CUDA headers in {homes[0]}; compiled with "
                "qwengpu's minimal device prelude (-nocudainc) instead\n"
            )
        prelude.write_text(_CLANG_PRELUDE)
        feature = ["-Xclang", "-target-feature", "-Xclang", _clang_ptx_feature(cc)]
        argv = [*base, "-nocudainc", *feature, "-include", str(prelude), *tail]
        ptx, log = _run(argv, tmp, out, renames)
        return _clang_result(ptx, note + log)


def _mentions(log: str, filename: str) -> bool:
    """Does a clang log report an error in the user's own file (not in CUDA headers)?"""
    return re.search(rf"(?m)^{re.escape(filename)}:\d+:(\d+:)? (fatal )?error:", log) is not None


def _clang_result(ptx: str | None, log: str) -> CompiledPtx:
    if ptx is None:
        raise CompileError(log or "clang failed")
    return CompiledPtx(ptx, "clang", log.strip())


_BACKENDS: dict[str, Callable[[str, str, str, list[str]], CompiledPtx]] = {
    "nvrtc": _compile_nvrtc,
    "clang": _compile_clang,
    "nvcc": _compile_nvcc,
}


# --------------------------------------------------------------------------- kernels

_LENGTH = re.compile(r"[1-9]\d*")


def _cxx_name(mangled: str) -> str | None:
    """The qualified C++ name of an Itanium-mangled function: _Z3fooPi -> 'foo',
    _ZN2ns3fooEPi -> 'ns::foo', _Z5scaleIiEvPT_ -> 'scale'. None if not mangled."""
    head = re.match(r"_ZL?(N)?", mangled)
    if not head:
        return None
    pos, parts = head.end(), []
    while length := _LENGTH.match(mangled, pos):
        pos = length.end() + int(length[0])
        parts.append(mangled[length.end() : pos])
        if not head[1]:  # not a nested name: a single component
            break
    if not parts or len(mangled) < pos or not all(parts):
        return None
    return "::".join("(anonymous namespace)" if p == "_GLOBAL__N_1" else p for p in parts)


def find_entry(module: Module, name: str) -> Kernel:
    """The kernel (.entry) called `name`: its exact PTX name, or its C++ name when the
    compiler mangled it (`foo` or `ns::foo` finds `_ZN2ns3fooEPi`)."""
    entries = {k: v for k, v in module.kernels.items() if v.is_entry}
    if name in entries:
        return entries[name]
    matches = []
    for ptx_name in entries:
        cxx = _cxx_name(ptx_name)
        if cxx is not None and (cxx == name or cxx.rsplit("::", 1)[-1] == name):
            matches.append(ptx_name)
    if len(matches) == 1:
        return entries[matches[0]]
    if matches:
        raise PtxError(
            f"kernel name {name!r} is ambiguous (overloads or template instances); use "
            f"one of the PTX names: {', '.join(sorted(matches))}"
        )
    available = [_describe(k) for k in entries] or ["(none)"]
    raise PtxError(f"no kernel named {name!r}; the PTX has: {', '.join(available)}")


def _describe(ptx_name: str) -> str:
    cxx = _cxx_name(ptx_name)
    return f"{ptx_name} ({cxx})" if cxx else ptx_name
