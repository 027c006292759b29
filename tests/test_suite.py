"""The kernel suite (tests/kernels) on the reference interpreter.

Every case launches its CUDA kernel through `qwengpu.RawKernel` and compares every array
argument, exactly, with the case's independent oracle. The suite is also checked for
shape: enough cases, unique names, every .cu file used, and every required feature
covered by several cases.
"""

import copy
import importlib.util
import re
import sys
import zlib
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"


def _load_cases():
    # Loaded by file path, exactly as `qgpu conform` loads it (tests/ is not a package).
    spec = importlib.util.spec_from_file_location("qgpu_kernel_cases", KERNEL_DIR / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


suite = _load_cases()
CASES = suite.CASES

# Feature -> the least number of cases that must carry its tag.
REQUIRED_TAGS: dict[str, int] = {
    # arithmetic
    "add_sub_mul": 3,
    "mulhi": 1,
    "wraparound": 3,
    "minmax_abs": 3,
    # division
    "div_var": 3,
    "div_const": 3,
    "div_signed": 3,
    "div_unsigned": 3,
    "neg_div": 3,
    # bits
    "bitwise": 3,
    "shift": 3,
    "shift_ge32": 1,
    "cmp_signed_unsigned": 3,
    "select": 3,
    "predicated": 3,
    "popc": 3,
    "clz": 2,
    "brev": 1,
    "ffs": 2,
    # narrow loads
    "byte_load": 3,
    "short_load": 1,
    # indexing
    "idx_1d": 3,
    "idx_2d": 3,
    "idx_3d": 2,
    "multi_cta": 5,
    # control flow
    "early_return": 3,
    "uniform_loop": 3,
    "divergent_loop": 3,
    "nested_loop": 2,
    "divergent_if": 3,
    "break_continue": 1,
    "reconverge_sync": 2,
    "grid_stride": 3,
    # shared memory
    "shared": 5,
    "syncthreads": 5,
    "tree_reduction": 2,
    "transpose": 2,
    "scan": 2,
    "sort": 2,
    # atomics
    "atomic_add": 3,
    "atomic_sub": 1,
    "atomic_minmax": 3,
    "atomic_bits": 1,
    "atomic_exch": 1,
    "atomic_cas": 1,
    "atomic_inc_dec": 2,
    "atomic_shared": 3,
    "atomic_global": 5,
    "contention": 3,
    "histogram": 2,
    # warp
    "shfl_up": 2,
    "shfl_down": 2,
    "shfl_xor": 1,
    "shfl_idx": 2,
    "shfl_width": 3,
    "warp_edges": 2,
    "ballot": 3,
    "any_all": 2,
    "laneid": 1,
    # classic kernels and misc
    "classic": 10,
    "dot": 2,
    "matmul": 2,
    "inline_asm": 3,
}

# Valid CUDA that qgpu refuses by design, with an explicit error. The cases stay in the
# suite for `qgpu conform` on real hardware; strict, so adding support flags the marker.
UNSUPPORTED_BY_DESIGN: dict[str, str] = {}

MAX_THREADS_PER_CTA = 16
MAX_CTAS = 16
MAX_DATA_WORDS = 100  # params + arrays; the machine has 126 words including shared memory


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _args(case) -> list:
    return case.make_args(np.random.default_rng(_seed(case.name)))


def _words(args: list) -> int:
    return sum(a.size if isinstance(a, np.ndarray) else 1 for a in args)


# -- the suite itself --------------------------------------------------------------------


def test_suite_size_and_names():
    names = [c.name for c in CASES]
    assert len(CASES) >= 60
    dupes = [n for n, k in Counter(names).items() if k > 1]
    assert not dupes, f"duplicate case names: {dupes}"


def test_every_kernel_file_is_used():
    files = {p.name for p in KERNEL_DIR.glob("*.cu")}
    used = {c.file for c in CASES}
    assert used <= files, f"cases name missing files: {sorted(used - files)}"
    assert files <= used, f"kernel files no case uses: {sorted(files - used)}"


def test_tag_coverage():
    counts = Counter(tag for c in CASES for tag in set(c.tags))
    short = {t: (counts[t], k) for t, k in REQUIRED_TAGS.items() if counts[t] < k}
    assert not short, f"features covered by too few cases (have, need): {short}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_is_well_formed(case):
    source = suite.load_source(case)
    assert re.search(rf'extern\s+"C"\s+__global__\s+void\s+{case.kernel}\s*\(', source), (
        f'{case.name}: {case.file} has no extern "C" kernel {case.kernel}'
    )
    assert len(case.grid) == 3 and len(case.block) == 3
    assert all(d >= 1 for d in (*case.grid, *case.block))
    assert int(np.prod(case.block)) <= MAX_THREADS_PER_CTA, f"{case.name}: CTA too large"
    assert int(np.prod(case.grid)) <= MAX_CTAS, f"{case.name}: grid too large"
    args = _args(case)
    for a in args:
        assert isinstance(a, np.ndarray | np.int32 | np.uint32), f"{case.name}: {type(a)}"
        assert a.dtype in (np.int32, np.uint32), f"{case.name}: dtype {a.dtype}"
        if isinstance(a, np.ndarray):
            assert a.ndim == 1 and a.size >= 1
    assert _words(args) <= MAX_DATA_WORDS, f"{case.name}: {_words(args)} words of data"
    # make_args is deterministic for a seed, and the oracle keeps shapes and dtypes.
    again = _args(case)
    for a, b in zip(args, again, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=f"{case.name}: make_args not deterministic")
    expected = case.oracle(copy.deepcopy(args))
    assert len(expected) == len(args), f"{case.name}: oracle returned {len(expected)} values"
    for k, (a, e) in enumerate(zip(args, expected, strict=True)):
        if isinstance(a, np.ndarray):
            assert isinstance(e, np.ndarray), f"{case.name}: argument {k} is no longer an array"
            assert e.dtype == a.dtype and e.shape == a.shape, f"{case.name}: argument {k}"
        else:
            assert e == a, f"{case.name}: oracle changed scalar argument {k}"
    # A kernel that wrote nothing must fail its case.
    assert any(
        isinstance(a, np.ndarray) and not np.array_equal(a, e)
        for a, e in zip(args, expected, strict=True)
    ), f"{case.name}: the expected outputs equal the inputs"


# -- running the kernels -----------------------------------------------------------------


@cache
def _kernel(file: str, name: str):
    import qwengpu

    source = (KERNEL_DIR / file).read_text()
    return qwengpu.RawKernel(source, name)


def _run_params():
    for c in CASES:
        marks = ()
        if c.name in UNSUPPORTED_BY_DESIGN:
            marks = pytest.mark.xfail(reason=UNSUPPORTED_BY_DESIGN[c.name], strict=True)
        yield pytest.param(c, id=c.name, marks=marks)


@pytest.mark.parametrize("case", list(_run_params()))
def test_kernel(case):
    args = _args(case)
    expected = case.oracle(copy.deepcopy(args))
    _kernel(case.file, case.kernel)(case.grid, case.block, args)
    for k, (got, want) in enumerate(zip(args, expected, strict=True)):
        if isinstance(want, np.ndarray):
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype
            np.testing.assert_array_equal(
                got,
                want,
                err_msg=f"{case.name}: argument {k} "
                f"({'hardware-defined case' if case.hardware_defined else 'exact'})",
            )
