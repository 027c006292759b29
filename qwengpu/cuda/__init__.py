"""CUDA front end: CUDA C++ -> PTX (NVRTC, clang or nvcc) -> the PTX IR."""

from qwengpu.cuda.compilers import CompiledPtx, compile_cuda, find_entry
from qwengpu.cuda.ptx import parse_ptx

__all__ = ["CompiledPtx", "compile_cuda", "find_entry", "parse_ptx"]
