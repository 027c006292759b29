"""Launches written by the model: the machine's layers plus random base layers in a real
Qwen3_5ForCausalLM, greedy decoding with transformers' cache, results read out of the
recurrent state. Every launch is replayed against the interpreter (--check) and its
arrays are compared with the interpreter's and the suite's oracle."""

from __future__ import annotations

import copy
import importlib.util
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from qwengpu import api
from qwengpu.host.check import CheckFailed, check_launch
from qwengpu.machine.model import MACHINE_SPEC

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def _suite():
    spec = importlib.util.spec_from_file_location("qgpu_kernel_cases", KERNELS / "cases.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


suite = _suite()
CASES = {c.name: c for c in suite.CASES}
DOT = (Path(__file__).resolve().parents[2] / "examples" / "dot.cu").read_text()

# Small cases for the default run (16 and 26 steps: a loop, brev and clz); the slow tier
# runs more, and every case that fits the machine.
DEFAULT_CASES = ["uniform_loop_zero_trips", "ffs"]
SLOW_CASES = [
    "atomic_sub",
    "predicated",
    "select_ternary",
    "shifts",
    "bitwise",
    "clamp",
    "popc",
    "clz",
    "bit_tricks",
    "count_if",
    "div_u_var",
]
_runs: dict[str, object] = {}  # launches kept for the tests that only inspect them


def _dot_args():
    return [
        np.array([1, 2, 3], np.int32),
        np.array([4, 5, 6], np.int32),
        np.zeros(1, np.int32),
        np.int32(3),
    ]


@pytest.mark.parametrize(("dtype", "prefill"), [("float32", True), ("bfloat16", False)])
def test_dot_product(backends, dtype, prefill):
    backend = backends.get(dtype)
    program = api.compile(DOT, spec=MACHINE_SPEC)
    args = _dot_args()
    run = backend.launch(program, 1, 4, args, prefill=prefill)
    print(
        f"dot ({dtype}, prefill={prefill}): {len(run.generated)} tokens, "
        f"{len(run.steps)} EXECs, {run.prompt_tokens} load tokens"
    )
    assert int(args[2][0]) == 32
    assert check_launch(program, run) == len(run.steps)
    assert run.generated[-1].kind == "END"
    _runs[dtype] = run


def _run_case(backend, name: str, dtype: str, progress=None):
    case = CASES[name]
    program = api.compile(suite.load_source(case), case.kernel, spec=MACHINE_SPEC)
    seed = zlib.crc32(case.name.encode())
    model_args = case.make_args(np.random.default_rng(seed))
    ref_args = copy.deepcopy(model_args)
    expected = case.oracle(copy.deepcopy(model_args))
    run = backend.launch(program, case.grid, case.block, model_args, progress=progress)
    api.launch(program, case.grid, case.block, ref_args)
    check_launch(program, run)
    for got, want, oracle in zip(model_args, ref_args, expected, strict=True):
        if isinstance(got, np.ndarray):
            assert np.array_equal(got, want), f"{name} ({dtype}): model != interpreter"
            assert np.array_equal(got, np.asarray(oracle).astype(got.dtype)), f"{name}: oracle"
    return run


@pytest.mark.parametrize(
    "name", DEFAULT_CASES + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW_CASES]
)
def test_suite_kernel_through_the_model(backends, name):
    said: list[str] = []
    run = _run_case(backends.get("float32"), name, "float32", progress=said.append)
    print(f"{name}: {len(run.generated)} tokens, {len(run.steps)} EXECs")
    # progress every 16 EXECs and at the end, warps counted from the scheduler's state
    assert len(said) == 1 + len(run.steps) // 16
    warps = -(-CASES[name].block[0] // MACHINE_SPEC.lanes)
    assert said[-1].startswith(f"CTA {CASES[name].grid[0]}/{CASES[name].grid[0]}: {warps}/{warps}")


def _fitting_cases() -> list[str]:
    from qwengpu.machine.rom import MachineUnsupported, check_supported

    names = []
    for case in suite.CASES:
        if case.block[1:] != (1, 1) or case.grid[1:] != (1, 1) or case.block[0] > 16:
            continue
        if case.grid[0] > 16:
            continue
        try:
            program = api.compile(suite.load_source(case), case.kernel, spec=MACHINE_SPEC)
            for i, block in enumerate(program.blocks):
                check_supported(i, block, MACHINE_SPEC)
        except MachineUnsupported:
            continue
        names.append(case.name)
    return names


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_fitting_suite_kernel(backends, dtype):
    names = _fitting_cases()
    assert len(names) >= 70
    for name in names:
        _run_case(backends.get(dtype), name, dtype)


def test_results_do_not_come_from_the_interpreter(backends, monkeypatch):
    """The interpreter is made unimportable and unusable during a model launch."""
    import qwengpu.interp.machine as interp

    backend = backends.get("float32")
    program = api.compile(DOT, spec=MACHINE_SPEC)

    def forbidden(*_a, **_k):
        raise AssertionError("the model backend called the interpreter")

    monkeypatch.setattr(interp, "run_program", forbidden)
    monkeypatch.setattr(interp.Interpreter, "step", forbidden)
    for name in [m for m in sys.modules if m.startswith("qwengpu.interp")]:
        monkeypatch.setitem(sys.modules, name, None)  # any import of it now fails
    args = _dot_args()
    result = api.launch(program, 1, 4, args, backend="model", model=backend)
    assert int(args[2][0]) == 32 and result.tokens > 0


def test_check_reports_the_first_divergence(backends):
    program = api.compile(DOT, spec=MACHINE_SPEC)
    run = copy.deepcopy(_runs.get("float32"))
    if run is None:
        run = backends.get("float32").launch(program, 1, 4, _dot_args())
    step = next(s for s in run.steps if s.block == 4)  # s2r r1, %tid.x: one token per lane
    i = next(k for k, t in enumerate(step.tokens) if t.kind == "FREG" and t.get("sel") == 2)
    bad = step.tokens[i]
    step.tokens[i] = type(bad)(bad.kind, tuple((k, 7 if k == "v" else v) for k, v in bad.payload))
    with pytest.raises(CheckFailed, match=r"step 4: cta 0 warp 0 block B4 lane 2 r1: expected 0x2"):
        check_launch(program, run)


def test_program_outside_the_machine_is_refused(backends):
    from qwengpu.machine.rom import MachineUnsupported

    src = 'extern "C" __global__ void k(unsigned* o)'
    src += " { o[threadIdx.x] = __umulhi(o[threadIdx.x], 77u + threadIdx.x); }"
    program = api.compile(src, spec=MACHINE_SPEC)
    with pytest.raises(MachineUnsupported, match="mulhu"):
        backends.get("float32").launch(program, 1, 4, [np.zeros(4, np.uint32)])


def test_layout_alone_matches_the_compiled_machine(compiled_machine):
    """A checkpoint's runtime rebuilds the schedule without weights (machine_layout); it
    must place every field and memory exactly where the compiled machine did."""
    from qwengpu.circuit import QWEN35_2B
    from qwengpu.machine.model import machine_layout

    layout = machine_layout(QWEN35_2B)
    built, rebuilt = compiled_machine.compiled.schedule, layout.compiled.schedule
    assert rebuilt.dims == built.dims
    assert rebuilt.layer_types == built.layer_types
    slots = [[(s.memory.name, s.value_heads) for s in p.slots] for p in built.layers]
    assert [[(s.memory.name, s.value_heads) for s in p.slots] for p in rebuilt.layers] == slots
    assert layout.code_dims == compiled_machine.code_dims
    assert layout.vocab.tokens == compiled_machine.vocab.tokens
