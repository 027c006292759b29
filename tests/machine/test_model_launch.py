"""Launches written by the model: the machine's layers plus random base layers in a real
Qwen3_5ForCausalLM, greedy decoding with transformers' cache, results read out of the
recurrent state. Every launch is replayed against the interpreter (--check) and its
arrays are compared with the interpreter's and the suite's oracle."""

from __future__ import annotations

import copy
import importlib.util
import math
import re
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from qwengpu import api
from qwengpu.errors import LaunchError, TrapError
from qwengpu.host.check import CheckFailed, check_launch
from qwengpu.host.model_backend import LaunchRequest, prefill_groups
from qwengpu.machine.model import MACHINE_SPEC, REDUCED_SPEC

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

# The default run: the dot product alone (prefill and token by token), and every suite
# kernel in both dtypes and both feedings (its program fed in one prefill, the chunked
# DeltaNet path, or token by token, the recurrent path): one batch per dtype, the kernels
# k = 0, 2, 4, ... of the suite sorted by length fed in one prefill in float32 and token by
# token in bfloat16, the others the other way round, so each of the four combinations runs
# half the suite, short and long kernels alike. The slow tier runs every kernel in all
# four. Address traps have their own launches below. On 2 CPU cores one batch of the suite
# (about 27,000 EXEC steps, 86,000 tokens) takes about 6 minutes in bfloat16 and 8 in
# float32 (docs/protocol.md, "Batches").
DTYPES = ["float32", "bfloat16"]
WARP_SIZE_TAGS = {
    "laneid", "warp_edges", "ballot", "any_all", "shfl_width", "shfl_up", "shfl_down",
}  # fmt: skip
"""Cases whose oracle (the CUDA answer) holds for 4-lane warps only: on the reduced preset's
2-lane warps the model must still equal the interpreter."""
DOT_TOKENS = {"qwen3.5-2b": 27, "qwen3.5-0.8b": 43}
"""Tokens the model writes for the dot product (docs/protocol.md; the original: 47)."""
FULL_MIN_CASES = 20  # kernels the slow tier runs on the full machine (2B geometry)
FULL_FORWARD_EVERY, FULL_FORWARD_AT = 16, (0, 7)
"""The default run checks launches k = 0, 7, 16, 23, ... (by length; both feedings) of each
dtype's suite batch against the full forward, an eighth of them; the slow tier every
launch. On 2 cores a full-forward pass of the test model (4 base layers, the whole LM
head) costs about five early-exit passes."""
_runs: dict[str, object] = {}  # launches kept for the tests that only inspect them


def _compile_case(case, spec):
    """On the reduced preset's 2-lane warps the suite's 4-lane warp kernels run with the
    machine's own warps (refused otherwise: tests/lower/test_warps.py)."""
    narrow = spec.lanes < suite.SUITE_WARP_LANES
    return api.compile(suite.load_source(case), case.kernel, spec=spec, narrow_warps=narrow)


def _dot_args():
    return [
        np.array([1, 2, 3], np.int32),
        np.array([4, 5, 6], np.int32),
        np.zeros(1, np.int32),
        np.int32(3),
    ]


def _dot(backend, dtype: str, prefill: bool):
    program = api.compile(DOT, spec=backend.machine.spec)
    args = _dot_args()
    run = backend.launch(program, 1, 4, args, prefill=prefill)
    print(
        f"dot ({backend.machine.geometry.name}, {dtype}, prefill={prefill}): "
        f"{len(run.generated)} tokens, {len(run.steps)} EXECs, {run.prompt_tokens} load tokens"
    )
    assert int(args[2][0]) == 32
    assert len(run.generated) <= DOT_TOKENS[backend.machine.geometry.name]
    assert check_launch(program, run) == len(run.steps)
    assert run.generated[-1].kind == "END"
    return run


# load tokens in one prefill (chunked DeltaNet path) and token by token (recurrent path);
# decoding is always the recurrent path, in both dtypes
@pytest.mark.parametrize(("dtype", "prefill"), [("float32", False), ("bfloat16", True)])
def test_dot_product(reduced, dtype, prefill):
    _runs[dtype] = _dot(reduced.get(dtype), dtype, prefill)


def _requests(spec, names: list[str]) -> list[tuple[LaunchRequest, list, list]]:
    """Each case's launch request with the interpreter's and the oracle's answers (all
    computed before any model launch, which may then run with the interpreter forbidden)."""
    out = []
    for name in names:
        case = CASES[name]
        program = _compile_case(case, spec)
        model_args = case.make_args(np.random.default_rng(zlib.crc32(case.name.encode())))
        ref_args = copy.deepcopy(model_args)
        api.launch(program, case.grid, case.block, ref_args)
        oracle = case.oracle(copy.deepcopy(model_args))
        out.append((LaunchRequest(program, case.grid, case.block, model_args), ref_args, oracle))
    return out


def _verify(name: str, job: tuple[LaunchRequest, list, list], run, dtype: str) -> None:
    """--check replay, then every array equal to the interpreter's (and to the CUDA
    oracle where it does not depend on the warp size)."""
    request, ref, oracle = job
    check_launch(request.program, run)
    cuda_answer = request.program.spec.lanes == 4 or not WARP_SIZE_TAGS & set(CASES[name].tags)
    for got, want, answer in zip(request.args, ref, oracle, strict=True):
        if isinstance(got, np.ndarray):
            assert np.array_equal(got, want), f"{name} ({dtype}): model != interpreter"
            if cuda_answer:
                assert np.array_equal(got, np.asarray(answer).astype(got.dtype)), name


def _feeding(prefill: bool) -> str:
    return "prefill" if prefill else "token by token"


def _launch_all(
    backend, launches: list[tuple[str, bool]], jobs, progress=None, full_forward=None
) -> list:
    """The launches, (kernel name, prefill) each, as one batch (their jobs from _requests):
    their runs."""
    prefill = [p for _, p in launches]
    requests = [j[0] for j in jobs]
    return backend.launch_many(
        requests, prefill=prefill, progress=progress, full_forward=full_forward
    )


def _full_forward_differs(backend, launches: list[tuple[str, bool]], runs, dtype) -> list[str]:
    """The launches again as one batch through every layer and the whole LM head: one line
    for each whose tokens differ from its early-exit run's."""
    jobs = _requests(backend.machine.spec, [name for name, _ in launches])
    full = _launch_all(backend, launches, jobs, full_forward=True)
    assert {r.forward for r in full} == {"full forward"}
    return [
        f"{name} ({dtype}, {_feeding(prefill)}): the full forward wrote other tokens"
        for (name, prefill), fast, slow in zip(launches, runs, full, strict=True)
        if fast.generated != slow.generated
    ]


def _failures(launches, jobs, runs, dtype: str) -> list[str]:
    """Each launch verified (_verify): the failures, one line per launch."""
    failed = []
    for (name, prefill), job, run in zip(launches, jobs, runs, strict=True):
        label = f"{dtype}, {_feeding(prefill)}"
        print(f"{name} ({label}): {len(run.generated)} tokens, {len(run.steps)} EXECs")
        try:
            _verify(name, job, run, label)
        except (AssertionError, CheckFailed) as e:
            failed.append(f"{name} ({label}): {e}")
    return failed


def _crossed(names: list[str], dtype: str, flip: bool = False) -> list[tuple[str, bool]]:
    """The default run's feedings: kernels 0, 2, ... in one prefill in float32 and token by
    token in bfloat16, the others the other way round (`flip`: every one the other way)."""
    first = (dtype == "float32") != flip
    return [(name, (k % 2 == 0) == first) for k, name in enumerate(names)]


def _paths_taken(cases, spec) -> dict[str, int]:
    """How many of the cases' programs, lowered for `spec`, take each pipeline path."""
    seen: dict[str, int] = {}
    for case in cases:
        program = _compile_case(case, spec)
        for path in _pipeline_paths(program):
            seen[path] = seen.get(path, 0) + 1
    return seen


def _pipeline_paths(program) -> set[str]:
    """The pipeline's paths a program's blocks take: a later stage's operand forwarded from
    the latest earlier stage that wrote it (register a, b or c; predicate guard, pa, pb;
    `reg.back{d}`: from d stages back), the branch on the last stage's predicate or on an
    earlier one's, a load, shuffle or vote after stage 0 (`op.*`, and `late.ld` from stage
    2 on), a guarded later stage, two stages' results travelling back, full blocks."""
    from qwengpu.isa.instr import Op, TermKind
    from qwengpu.machine.rom import live_outs

    paths = set()
    for block, live in zip(program.blocks, live_outs(program.blocks), strict=True):
        instrs = block.instrs
        if len(instrs) < 2:
            continue
        paths.add(f"size.{len(instrs)}")
        for s in range(1, len(instrs)):
            later = instrs[s]
            for n in "abc":
                writer = max(
                    (t for t in range(s) if getattr(later, n) in instrs[t].writes()), default=None
                )
                if writer is not None and (n != "c" or later.op in (Op.SHFL, Op.ATOM)):
                    paths |= {f"reg.{n}", f"reg.back{s - writer}"}
            written = {p for t in range(s) for p in instrs[t].pred_writes()}
            uses = {"guard": later.guard, "pa": later.pa, "pb": later.pb}
            paths |= {
                f"pred.{n}" for n, p in uses.items() if p in written and p in later.pred_reads()
            }
            if later.op in (Op.LD, Op.SHFL, Op.VOTE):
                paths.add(f"op.{later.op.value}")
                if s >= 2 and later.op is Op.LD:
                    paths.add("late.ld")
            if later.guard is not None:
                paths.add("guarded")
        if block.term.kind is TermKind.BRANCH:
            setters = [t for t, i in enumerate(instrs) if block.term.pred in i.pred_writes()]
            if setters:
                paths.add("branch.second" if setters[-1] == len(instrs) - 1 else "branch.first")
        travelling = [set(i.writes()) & live for i in instrs]
        if sum(1 for w in travelling if w) >= 2:
            paths.add("both.travel")
    return paths


def test_the_suite_takes_every_pipeline_path():
    """The suite run below proves the pipeline only where its kernels take its paths: every
    forwarding path, loads and shuffles in the second stage, guards there, and blocks whose
    two results both travel back, each in several kernels (lowered for the model's spec)."""
    seen = _paths_taken(suite.CASES, REDUCED_SPEC)
    wanted = ["reg.a", "reg.b", "pred.guard", "branch.second", "branch.first", "op.ld"]
    wanted += ["op.shfl", "guarded", "both.travel"]
    print(sorted(seen.items()))
    assert all(seen.get(path, 0) >= 2 for path in wanted), sorted(seen.items())


def test_the_2b_tier_takes_the_four_stage_paths():
    """The slow tier runs the 4-stage machine on 20 kernels: among them, full blocks, values
    forwarded over two and three stages, loads from the third stage on, branches on the
    last stage's predicate and an earlier one's, several stages' results travelling back."""
    names = _fitting_cases(MACHINE_SPEC)[:FULL_MIN_CASES]
    seen = _paths_taken([CASES[name] for name in names], MACHINE_SPEC)
    wanted = ["size.4", "reg.back2", "reg.back3", "late.ld", "branch.second", "branch.first"]
    wanted += ["both.travel", "reg.a", "reg.b"]
    print(sorted(seen.items()))
    assert all(seen.get(path, 0) >= 1 for path in wanted), sorted(seen.items())


@pytest.mark.parametrize("dtype", DTYPES)  # bfloat16 last: the bit-for-bit test below uses it
def test_every_suite_kernel_in_both_dtypes_and_both_feedings(reduced, dtype, without_interpreter):
    names = _fitting_cases(reduced.spec)
    assert len(names) == len(suite.CASES)  # every suite kernel fits the machine
    launches = _crossed(names, dtype)
    backend = reduced.get(dtype)
    jobs = _requests(backend.machine.spec, [name for name, _ in launches])
    said: list[str] = []
    with without_interpreter():  # the model's results do not come from it
        runs = _launch_all(backend, launches, jobs, said.append)
    failed = _failures(launches, jobs, runs, dtype)
    assert not failed, "\n".join(failed)
    # early exit (the default) wrote them: an eighth of them again through every layer
    assert {r.forward for r in runs} == {"early exit"}
    again = [k for k in range(len(launches)) if k % FULL_FORWARD_EVERY in FULL_FORWARD_AT]
    assert {launches[k][1] for k in again} == {True, False}  # both feedings
    differ = _full_forward_differs(
        backend, [launches[k] for k in again], [runs[k] for k in again], dtype
    )
    assert not differ, "\n".join(differ)
    # progress every 16 EXECs and at the end of each launch (launches of one kernel share
    # its name), its last line with every warp done, read from the scheduler's state
    for kernel in {job[0].program.name for job in jobs}:
        mine = [line for line in said if line.startswith(f"{kernel}: ")]
        ran = [
            (n, r)
            for (n, _), j, r in zip(launches, jobs, runs, strict=True)
            if j[0].program.name == kernel
        ]
        assert len(mine) == sum(1 + len(r.steps) // 16 for _, r in ran), mine
        if len({n for n, _ in ran}) == 1:  # one case: one geometry
            case = CASES[ran[0][0]]
            warps = -(-math.prod(case.block) // reduced.spec.lanes)
            grid = math.prod(case.grid)
            assert mine[-1].startswith(f"{kernel}: CTA {grid}/{grid}: {warps}/{warps}")


FAST_DECODE_BATCH = ["dot", "cas_own", "vote_small"]  # atomics, votes, a loop: short launches


@pytest.mark.parametrize("prefill", [False, True], ids=["token by token", "one prefill"])
def test_the_cpu_decode_path_gives_transformers_tokens_and_states_bit_for_bit(
    reduced, monkeypatch, request, prefill
):
    """The same batch through every layer, run with transformers' modules and torch kernel,
    and with qwengpu's CPU path (host.decode_kernel and the layers' live parts,
    host.live_decode: sparse projections, the memories' rows alone, the live heads'
    prefill): the same tokens and every DeltaNet state of the circuit layers identical to
    the bit."""
    from qwengpu.host import decode_kernel, live_decode
    from qwengpu.host.model_backend import ModelBackend

    if reduced.device != "cpu":
        pytest.skip("the CPU decode path runs on the CPU only")
    backend = reduced.get("bfloat16")  # the dtype the suite test above left built
    reads: list[tuple] = []  # (cache rows, their states) at each launch's end
    read = ModelBackend.recurrent_states
    kernel, calls = decode_kernel.recurrent_gated_delta_rule, []
    live_forward, live_calls = live_decode.LiveDeltaNet.forward, []
    sparse_rows, row_calls = live_decode.sparse_rows_delta_rule, []

    def keep_final_states(self, cache, rows=None):
        reads.append((rows, read(self, cache, rows)))
        return reads[-1][1]

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    def live_counted(self, *args, **kwargs):
        live_calls.append(self.module.layer_idx)
        return live_forward(self, *args, **kwargs)

    def rows_counted(*args, **kwargs):
        core = sparse_rows(*args, **kwargs)
        row_calls.append(core is not None)
        return core

    monkeypatch.setattr(ModelBackend, "recurrent_states", keep_final_states)
    monkeypatch.setattr(live_decode, "sparse_rows_delta_rule", rows_counted)
    monkeypatch.setattr(decode_kernel, "recurrent_gated_delta_rule", counted)
    monkeypatch.setattr(live_decode.LiveDeltaNet, "forward", live_counted)
    batch_sizes: list[int] = []
    hook = backend.model.register_forward_pre_hook(
        lambda _m, _a, kw: batch_sizes.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    request.addfinalizer(hook.remove)
    runs, states = {}, {}
    for fast in (False, True):
        monkeypatch.setattr(backend, "fast_decode", fast)
        monkeypatch.setattr(backend, "live_parts", None)  # found again under the patch
        jobs = _requests(backend.machine.spec, FAST_DECODE_BATCH)
        reads.clear()
        batch_sizes.clear()
        # every layer: the base's DeltaNets run qwengpu's decode kernel
        runs[fast] = backend.launch_many([j[0] for j in jobs], prefill=prefill, full_forward=True)
        states[fast] = list(reads)
        # the first passes: the prefill's groups of similar lengths, or every row's first
        # token; then an ended launch leaves the batch (its row read, then dropped)
        lengths = [r.prompt_tokens for r in runs[fast]]
        first = [len(g) for g in prefill_groups(lengths)] if prefill else [len(jobs)]
        decode = batch_sizes[len(first) :]
        assert batch_sizes[: len(first)] == first and sum(first) == len(jobs)
        assert decode[0] == len(jobs) and decode[-1] == 1
        assert decode == sorted(decode, reverse=True)
        # no pass wasted on padding: token by token, each row starts on its own prompt
        fed = 0 if prefill else 1  # prompt tokens past the first pass's, per generated one
        assert len(batch_sizes) == len(first) - 1 + max(
            len(r.generated) + fed * (r.prompt_tokens - 1) for r in runs[fast]
        )
        assert bool(calls) == fast  # the decode passes ran qwengpu's kernel, or never
        assert bool(live_calls) == fast  # and the DeltaNet layers' live parts
        assert any(row_calls) == fast  # reading and writing the memories' rows alone
        for name, job, run in zip(FAST_DECODE_BATCH, jobs, runs[fast], strict=True):
            _verify(name, job, run, "bfloat16")
    # circuit layers with idle heads only: the base layers' heads are all live
    circuit = reduced.machine.layer_types
    assert set(live_calls) <= {i for i, kind in enumerate(circuit) if kind == "linear_attention"}
    silent = {m.layer_idx for m in backend.live_parts.forwards if hasattr(m, "o_proj")}
    assert silent == {i for i, kind in enumerate(circuit) if kind == "full_attention"}
    for reference, fast in zip(runs[False], runs[True], strict=True):
        assert fast.generated == reference.generated
    assert len(states[False]) > 1  # the launches did not all end on the same pass
    assert [rows for rows, _ in states[True]] == [rows for rows, _ in states[False]]
    idle = {  # circuit DeltaNet layers with no live head
        module.layer_idx
        for module, forward in backend.live_parts.forwards.items()
        if isinstance(forward.__self__, live_decode.LiveDeltaNet)
        and not len(forward.__self__.heads)
    }
    assert idle  # the reduced machine has some
    for (_, got), (_, want) in zip(states[True], states[False], strict=True):
        assert set(got) == set(want) - idle  # layers with no live head keep no state
        for layer in want:
            if layer in idle:
                assert not want[layer].any(), f"layer {layer}"
            else:
                assert np.array_equal(got[layer], want[layer]), f"layer {layer}"


def _fitting_cases(spec) -> list[str]:
    """Suite cases the machine runs (at most 16 threads per CTA and 16 CTAs, every
    instruction supported, the program within the ROM), shortest first."""
    if spec not in _fitting:
        _fitting[spec] = _find_fitting_cases(spec)
    return list(_fitting[spec])


_fitting: dict[object, list[str]] = {}


def _find_fitting_cases(spec) -> list[str]:
    from qwengpu.errors import ResourceError
    from qwengpu.machine.rom import MachineUnsupported, check_supported

    steps = {}
    for case in suite.CASES:
        if math.prod(case.block) > 16 or math.prod(case.grid) > 16:
            continue
        try:
            program = _compile_case(case, spec)
            for i, block in enumerate(program.blocks):
                check_supported(i, block, spec)
        except (MachineUnsupported, ResourceError):  # not in the circuit / too big for it
            continue
        args = case.make_args(np.random.default_rng(zlib.crc32(case.name.encode())))
        steps[case.name] = api.launch(program, case.grid, case.block, args).steps
    return sorted(steps, key=steps.get)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_suite_kernel_in_every_combination(reduced, dtype):
    """The default run's batch and its flip: every kernel fed both ways, each with early
    exit and through every layer (the same tokens). Two batches, not one of twice the
    size: in float32 one of 122 launches peaks at about 18 GB."""
    names = _fitting_cases(reduced.spec)
    failed = []
    for flip in (False, True):
        launches = _crossed(names, dtype, flip)
        jobs = _requests(reduced.spec, names)
        backend = reduced.get(dtype)
        runs = _launch_all(backend, launches, jobs)
        failed += _failures(launches, jobs, runs, dtype)
        failed += _full_forward_differs(backend, launches, runs, dtype)
    assert not failed, "\n".join(failed)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_full_machine_on_the_2b_geometry(full, dtype):
    backend = full.get(dtype)
    _dot(backend, dtype, prefill=dtype == "float32")
    names = _fitting_cases(full.spec)[:FULL_MIN_CASES]
    launches = [(name, prefill) for prefill in (True, False) for name in names]
    jobs = _requests(full.spec, [name for name, _ in launches])
    runs = _launch_all(backend, launches, jobs)
    failed = _failures(launches, jobs, runs, dtype)
    failed += _full_forward_differs(backend, launches, runs, dtype)
    assert not failed, "\n".join(failed)


def test_dynamic_shared_memory_on_the_model(reduced):
    """`extern __shared__` sized at launch: the model's load tokens lay the arrays out
    after it, as the interpreter does (tests/host/test_launch.py)."""
    from tests.host.test_launch import DYNAMIC_SHARED, _rev_args

    backend = reduced.get("float32")
    program = api.compile(DYNAMIC_SHARED, spec=backend.machine.spec)
    want, got = _rev_args(), _rev_args()
    api.launch(program, 1, 8, want, shared_mem=32)
    run = backend.launch(program, 1, 8, got, shared_mem=32)
    assert got[1].tolist() == want[1].tolist() and check_launch(program, run) == len(run.steps)


def test_launch_many_takes_a_feeding_per_request(reduced):
    from qwengpu.errors import ArgError

    backend = reduced.get("bfloat16")  # the dtype the tests above left built
    program = api.compile(DOT, spec=reduced.spec)
    request = LaunchRequest(program, 1, 4, _dot_args())
    with pytest.raises(ArgError, match="2 requests but 1 prefill flags"):
        backend.launch_many([request, request], prefill=[True])


@pytest.mark.parametrize("prefill", [True, False], ids=["one prefill", "token by token"])
def test_raw_kernel_feeds_the_model_as_asked(reduced, request, prefill):
    """RawKernel(..., backend="model", prefill=...) (and so `qgpu run --feed`): one forward
    for the load tokens, or one per load token."""
    backend = reduced.get("bfloat16")  # the dtype the tests above left built
    passes: list[int] = []
    hook = backend.model.register_forward_pre_hook(lambda *_: passes.append(1))
    request.addfinalizer(hook.remove)
    kernel = api.RawKernel(DOT, "dot", backend="model", model=backend, prefill=prefill)
    args = _dot_args()
    result = kernel(1, 4, args)
    assert int(args[2][0]) == 32
    run = result.model_launch
    fed = 1 if prefill else run.prompt_tokens  # forwards that read load tokens
    assert len(passes) == fed + len(run.generated) - 1  # the last token is not fed


def _precision_settings(torch) -> dict[str, object]:
    b = torch.backends
    return {
        "cuda.matmul": b.cuda.matmul.fp32_precision,
        "cudnn.conv": b.cudnn.conv.fp32_precision,
        "mkldnn.matmul": b.mkldnn.matmul.fp32_precision,
        "mkldnn.conv": b.mkldnn.conv.fp32_precision,
        "bf16 reduction": b.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }


def test_a_launch_computes_in_ieee_arithmetic_whatever_the_caller_set(reduced, request):
    """A caller's torch.set_float32_matmul_precision("medium") (bfloat16 products on CPUs
    with AMX, TF32 on CUDA) and cuDNN's TF32 convolutions hold outside the launch only:
    every forward of the launch runs float32 products in float32 and sums bfloat16 ones
    in float32."""
    import torch

    backend = reduced.get("bfloat16")  # the dtype the tests above left built
    request.addfinalizer(lambda: torch.set_float32_matmul_precision("highest"))
    torch.set_float32_matmul_precision("medium")
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    callers = _precision_settings(torch)
    assert callers["mkldnn.matmul"] == "bf16" and callers["cuda.matmul"] == "tf32"
    seen: list[dict[str, object]] = []
    hook = backend.model.register_forward_pre_hook(
        lambda *_: seen.append(_precision_settings(torch))
    )
    request.addfinalizer(hook.remove)
    args = _dot_args()
    backend.launch(api.compile(DOT, spec=reduced.spec), 1, 4, args, prefill=False)
    assert int(args[2][0]) == 32
    exact = {"bf16 reduction": False} | {k: "ieee" for k in callers if k != "bf16 reduction"}
    assert seen and all(s == exact for s in seen)
    assert _precision_settings(torch) == callers  # the caller's again


def _dot_run_to_corrupt(reduced, program):
    """A copy of the float32 dot-product launch (the one test_dot_product ran, or a new one)."""
    run = _runs.get("float32")
    if run is None:
        run = reduced.get("float32").launch(program, 1, 4, _dot_args())
    return copy.deepcopy(run)


def test_check_reports_the_first_divergence(reduced):
    program = api.compile(DOT, spec=reduced.spec)
    run = _dot_run_to_corrupt(reduced, program)
    # the block of `s2r r1, %tid.x`: one write-back per lane; corrupt lane 1's in warp 1
    b = next(
        b for b, blk in enumerate(program.blocks) if blk.instrs and blk.instrs[0].op.value == "s2r"
    )
    k, step = next((k, s) for k, s in enumerate(run.steps) if s.block == b and s.warp == 1)
    i = next(j for j, t in enumerate(step.tokens) if t.kind == "FREG" and t.get("sel") == 1)
    bad = step.tokens[i]
    step.tokens[i] = type(bad)(bad.kind, tuple((n, 7 if n == "v" else v) for n, v in bad.payload))
    tid = reduced.spec.lanes + 1
    expected = rf"step {k}: cta 0 warp 1 block B{b} lane 1 r1: expected {tid:#x}"
    with pytest.raises(CheckFailed, match=expected):
        check_launch(program, run)


def test_check_compares_the_lane_of_each_stored_word(reduced):
    program = api.compile(DOT, spec=reduced.spec)
    run = _dot_run_to_corrupt(reduced, program)
    # warp 0's atom.add stores lane 0's word, then lane 1's: name the lanes the other way
    k, step = next(
        (k, s)
        for k, s in enumerate(run.steps)
        if s.warp == 0 and len(s.lanes) == 2 and any(t.kind == "FAMEM" for t in s.tokens)
    )
    for i, t in enumerate(step.tokens):
        if t.kind == "FAMEM":
            swapped = tuple((n, 1 - v if n == "lane" else v) for n, v in t.payload)
            step.tokens[i] = type(t)(t.kind, swapped)
    with pytest.raises(CheckFailed, match=rf"step {k}: .*'lane 0: mem\[\d+\]=0x4'"):
        check_launch(program, run)


def test_a_program_for_another_machine_is_refused(reduced):
    import dataclasses

    from qwengpu.errors import ArgError

    src = 'extern "C" __global__ void k(unsigned* o)'
    src += " { o[threadIdx.x] = __umulhi(o[threadIdx.x], 77u + threadIdx.x); }"
    native = dataclasses.replace(reduced.spec, mul_high=True)  # an ALU with mulhu
    program = api.compile(src, spec=native)
    assert any(i.op.value == "mulhu" for b in program.blocks for i in b.instrs)
    with pytest.raises(ArgError, match="was lowered for"):
        reduced.get("float32").launch(program, 1, 4, [np.zeros(4, np.uint32)])


TRAP = """extern "C" __global__ void poke(unsigned* p, int stride)
{ *(unsigned*)((char*)p + threadIdx.x * stride) = 7u; }"""


@pytest.mark.parametrize("stride", [2, 600], ids=["misaligned", "outside"])
def test_an_illegal_address_traps_as_in_the_interpreter(reduced, stride):
    program = api.compile(TRAP, spec=reduced.spec)
    with pytest.raises(TrapError) as expected:  # thread 1's address is the bad one
        api.launch(program, 1, 2, [np.zeros(4, np.uint32), np.int32(stride)])
    with pytest.raises(TrapError) as got:
        reduced.get("float32").launch(program, 1, 2, [np.zeros(4, np.uint32), np.int32(stride)])
    assert str(got.value) == str(expected.value)
    assert "thread 1 of CTA 0" in str(got.value)


PEEK = """extern "C" __global__ void peek(unsigned* p, unsigned* o, int stride)
{ o[threadIdx.x] = *(unsigned*)((char*)p + (threadIdx.x ^ 1) * stride); }"""


@pytest.mark.parametrize("stride", [2, 600], ids=["misaligned", "outside"])
def test_a_trap_on_an_address_its_own_block_computed_says_what_it_can(reduced, stride):
    """The load's address register comes from an earlier stage of the same block: the
    host cannot read it from the state, so the message names the register instead, with
    the interpreter's thread, place and reason."""
    program = api.compile(PEEK, spec=reduced.spec)
    (block,) = [  # the case under test: ld [r] in stage 1, r written by stage 0
        b
        for b in program.blocks
        if b.instrs[-1].op.value == "ld" and b.instrs[-1].a in b.instrs[0].writes()
    ]
    args = [np.zeros(4, np.uint32), np.zeros(2, np.uint32), np.int32(stride)]
    with pytest.raises(TrapError) as expected:  # thread 0's address is the bad one
        api.launch(program, 1, 2, args)
    with pytest.raises(TrapError) as got:
        reduced.get("float32").launch(program, 1, 2, args)
    place, _, fault = str(expected.value).partition(": byte address ")
    fault = fault.split(" ", 1)[1]
    assert str(got.value).startswith(f"{place}: the byte address (r{block.instrs[-1].a}, ")
    assert str(got.value).endswith(fault)
    assert "thread 0 of CTA 0" in place


def _same_layout(compiled) -> None:
    from qwengpu.machine.model import machine_layout

    layout = machine_layout(compiled.geometry)
    built, rebuilt = compiled.compiled.schedule, layout.compiled.schedule
    assert layout.spec == compiled.spec
    assert rebuilt.dims == built.dims
    assert rebuilt.layer_types == built.layer_types
    slots = [[(s.memory.name, s.value_heads) for s in p.slots] for p in built.layers]
    assert [[(s.memory.name, s.value_heads) for s in p.slots] for p in rebuilt.layers] == slots
    assert layout.code_dims == compiled.code_dims
    assert layout.vocab.tokens == compiled.vocab.tokens


def test_layout_alone_matches_the_compiled_machine(reduced):
    """A checkpoint's runtime rebuilds the schedule without weights (machine_layout); it
    must place every field and memory exactly where the compiled machine did."""
    _same_layout(reduced.machine)


@pytest.mark.slow
def test_the_2b_layout_alone_matches_the_compiled_machine(full):
    _same_layout(full.machine)


def test_a_runaway_launch_ends_at_its_step_budget(reduced):
    src = 'extern "C" __global__ void spin(volatile int* a) { while (a[0] == 0) { a[1]++; } }'
    program = api.compile(src, spec=reduced.spec)
    budget = r"launch of 'spin' ran past its step budget of 8 EXEC steps"
    with pytest.raises(LaunchError, match=budget):
        reduced.get("float32").launch(program, 1, 2, [np.zeros(2, np.int32)], max_steps=8)


def test_a_launch_without_exec_tokens_ends_with_a_clear_error(reduced):
    """A model that stops writing EXECs (say, one write-back token forever) fails as soon
    as it passes the most any step writes back, not after the whole step budget."""
    from qwengpu.host.model_backend import _Job, tokens_between_execs
    from qwengpu.machine.tokens import token

    backend = reduced.get("float32")
    program = api.compile(DOT, spec=reduced.spec)
    job = _Job("dot", program, (1, 1, 1), (4, 1, 1), None, [], [])
    limit = tokens_between_execs(reduced.spec)
    exec_id, word_id, end_id = backend.ids(
        [token("EXEC", b=0, w=0, mask=1), token("FREG", s=0, sel=0, n=1, v=7), token("END")]
    )
    backend._take(job, exec_id, end_id, budget=100)
    for _ in range(limit):
        backend._take(job, word_id, end_id, budget=100)
    with pytest.raises(LaunchError, match=rf"wrote {limit + 1} tokens since its last EXEC"):
        backend._take(job, word_id, end_id, budget=100)


def test_the_quickstart_command_prints_the_models_result_and_rate(
    reduced, monkeypatch, capsys, without_interpreter
):
    """README's first command (`qgpu run examples/dot.cu --backend model --model memory`)
    on this session's reduced machine: the result came out of the model's state, with the
    tokens it wrote and their rate; --json carries tokens, seconds and tokens_per_second."""
    import json

    import qwengpu.host.model_backend as backends
    from qwengpu.cli.main import main

    backend = reduced.get("float32")
    monkeypatch.setattr(backends, "model_backend", lambda model, **_: backend)
    args = ["run", str(Path(__file__).resolve().parents[2] / "examples" / "dot.cu")]
    args += ["--backend", "model", "--model", "memory"]
    args += ["--arg", "int32:[1,2,3]", "--arg", "int32:[4,5,6]", "--arg", "int32:[0]"]
    args += ["--arg", "int32:3"]
    with without_interpreter():
        assert main(args) == 0
        shown = capsys.readouterr()
        assert main([*args, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
    assert "dot_param_2 = [32]" in shown.out.splitlines()
    summary = shown.err.splitlines()[-1]
    assert re.fullmatch(
        r"# \d+ steps, (\d+) tokens written by the model in [\d.]+ s "
        r"\([\d.]+ tokens/s; \d+ load tokens; early exit\)",
        summary,
    ), summary
    assert report["args"][2] == [32] and report["backend"] == "model"
    assert report["forward"] == "early exit"
    assert report["tokens"] <= DOT_TOKENS[backend.machine.geometry.name]
    assert report["seconds"] > 0
    assert report["tokens_per_second"] == pytest.approx(
        report["tokens"] / report["seconds"], rel=0.01
    )
