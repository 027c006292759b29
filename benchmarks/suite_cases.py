"""The kernel suite's cases (tests/kernels/cases.py), for the benchmarks that launch them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_suite() -> ModuleType:
    """tests/kernels/cases.py as a module (CASES, load_source)."""
    spec = importlib.util.spec_from_file_location(
        "qgpu_kernel_cases", ROOT / "tests" / "kernels" / "cases.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compile_case(suite: ModuleType, case: Any, spec: Any) -> Any:
    """A case's program for `spec`; warp kernels run with the machine's warps where they
    are narrower than the suite's (tests/kernels/cases.py, SUITE_WARP_LANES)."""
    from qwengpu import api

    narrow = spec.lanes < suite.SUITE_WARP_LANES
    return api.compile(suite.load_source(case), case.kernel, spec=spec, narrow_warps=narrow)
