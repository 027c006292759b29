"""Hardware conformance: run the kernel suite on a real GPU and on our interpreter.

With a GPU, each case of the suite runs on the GPU (the truth), the result is recorded
to a JSON file and compared with what `qwengpu.RawKernel` (the interpreter) computes.
Without one, a committed recording is replayed: the interpreter runs on the recorded
inputs and must reproduce the recorded outputs. With neither, the run is skipped.

A case's inputs come from `case.make_args(np.random.default_rng(case_seed(case.name)))`
with `case_seed(name) = zlib.crc32(name.encode())`, so any test can regenerate them.

Per case: match, mismatch (first differing value), error, or, in replay, stale (the
.cu changed since it was recorded) / unrecorded (no entry). The suite's own oracle is
checked against the hardware too; an oracle that disagrees fails the run. The
interpreter runs with `case.spec`, else the suite's `SPEC`, else RawKernel's default.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from qwengpu.errors import QgpuError, TrapError
from qwengpu.host import hardware

DEFAULT_SUITE = Path("tests/kernels/cases.py")
DEFAULT_OUT = Path("tests/kernels/hardware_results.json")

FAILING = frozenset({"mismatch", "error"})


def case_seed(name: str) -> int:
    """The RNG seed of a case's inputs: zlib.crc32 of its name."""
    return zlib.crc32(name.encode())


def case_args(case: Any) -> list:
    """The case's launch arguments, generated the one reproducible way."""
    return list(case.make_args(np.random.default_rng(case_seed(case.name))))


# --- suite --------------------------------------------------------------------------


def load_suite(path: Path) -> ModuleType:
    """Import the suite module from its file; it must define CASES and load_source."""
    path = Path(path).resolve()
    if not path.is_file():
        raise QgpuError(
            f"conformance suite not found: {path} (run from the repo root or pass --suite)"
        )
    name = f"_qgpu_suite_{zlib.crc32(str(path).encode()):08x}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise QgpuError(f"cannot import conformance suite {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise QgpuError(
            f"cannot load conformance suite {path}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if str(path.parent) in sys.path:
            sys.path.remove(str(path.parent))
    for attr in ("CASES", "load_source"):
        if not hasattr(module, attr):
            raise QgpuError(f"conformance suite {path} defines no {attr}")
    return module


def _dims(d: int | Sequence[int]) -> tuple[int, int, int]:
    t = (d,) if isinstance(d, int) else tuple(int(x) for x in d)
    return (*t, *(1,) * (3 - len(t)))  # type: ignore[return-value]


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


# --- values <-> JSON ----------------------------------------------------------------


def encode_value(v: Any) -> dict[str, Any]:
    """A launch argument as JSON: arrays keep dtype and shape, scalars their dtype."""
    if isinstance(v, np.ndarray):
        return {"dtype": str(v.dtype), "shape": list(v.shape), "data": v.ravel().tolist()}
    if isinstance(v, np.generic):
        return {"dtype": str(v.dtype), "value": v.item()}
    if isinstance(v, int) and not isinstance(v, bool):
        return {"dtype": "int", "value": v}
    raise QgpuError(f"cannot record a {type(v).__name__} argument")


def decode_value(d: dict[str, Any]) -> Any:
    if "data" in d:
        return np.array(d["data"], dtype=d["dtype"]).reshape(d["shape"])
    if d["dtype"] == "int":
        return int(d["value"])
    return np.dtype(d["dtype"]).type(d["value"])


def _dumps(obj: Any, level: int = 0) -> str:
    """Stable JSON: sorted keys, two-space indent, lists of plain values on one line."""
    pad, end = "  " * (level + 1), "  " * level
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad}{json.dumps(k)}: {_dumps(obj[k], level + 1)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(obj, list) and any(isinstance(x, dict | list) for x in obj):
        return "[\n" + ",\n".join(pad + _dumps(x, level + 1) for x in obj) + "\n" + end + "]"
    return json.dumps(obj)


def write_recording(path: Path, data: dict[str, Any]) -> None:
    """Write the recording atomically (temp file in the same folder, then os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_dumps(data) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_recording(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise QgpuError(f"cannot read hardware recording {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise QgpuError(f"hardware recording {path} is not a JSON object")
    return data


# --- outcomes and comparison --------------------------------------------------------


@dataclass
class Outcome:
    """What a launch left: the final arguments, or the trap it ended in."""

    outputs: list | None
    trap: str | None = None


def _fmt(v: Any) -> str:
    if isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
        iv = int(v)
        return f"{iv} (0x{iv & 0xFFFFFFFF:x})" if -(2**31) <= iv < 2**32 else str(iv)
    return repr(v.item() if isinstance(v, np.generic) else v)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def first_difference(expected: list, got: list, what: tuple[str, str]) -> str | None:
    """None if equal, else where the first difference is and both values."""
    e_name, g_name = what
    if len(expected) != len(got):
        return f"{len(expected)} arguments from {e_name}, {len(got)} from {g_name}"
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        if isinstance(e, np.ndarray) or isinstance(g, np.ndarray):
            ea, ga = np.asarray(e), np.asarray(g)
            if ea.shape != ga.shape:
                return f"arg {i}: shape {ea.shape} from {e_name}, {ga.shape} from {g_name}"
            diff = np.flatnonzero(_bits(ea).ravel() != _bits(ga).ravel())
            if diff.size:
                flat = int(diff[0])
                idx = np.unravel_index(flat, ea.shape) if ea.ndim > 1 else (flat,)
                where = ", ".join(str(int(x)) for x in idx)
                return (
                    f"arg {i} [{where}]: {e_name} {_fmt(ea.ravel()[flat])}, "
                    f"{g_name} {_fmt(ga.ravel()[flat])} ({diff.size} of {ea.size} differ)"
                )
        elif e != g:
            return f"arg {i}: {e_name} {_fmt(e)}, {g_name} {_fmt(g)}"
    return None


def compare_outcomes(expected: Outcome, got: Outcome, what: tuple[str, str]) -> str | None:
    """None if the two launches agree (same outputs, or both trapped)."""
    e_name, g_name = what
    if expected.trap is not None or got.trap is not None:
        if expected.trap is not None and got.trap is not None:
            return None
        if expected.trap is not None:
            return f"{e_name} trapped ({expected.trap}) but {g_name} finished"
        return f"{g_name} trapped ({got.trap}) but {e_name} finished"
    assert expected.outputs is not None and got.outputs is not None
    return first_difference(expected.outputs, got.outputs, what)


def _copy_args(args: list) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else copy.copy(a) for a in args]


def run_interpreter(
    source: str, kernel: str, grid: tuple, block: tuple, args: list, spec: Any = None
) -> Outcome:
    """Run on our interpreter (qwengpu.RawKernel, with `spec` if given); a TrapError is
    an outcome too."""
    from qwengpu import RawKernel

    work = _copy_args(args)
    kw = {} if spec is None else {"spec": spec}
    try:
        RawKernel(source, kernel, **kw)(grid, block, work)
    except TrapError as exc:
        return Outcome(None, trap=f"{type(exc).__name__}: {exc}")
    return Outcome(work)


def compile_for_gpu(source: str, kernel: str) -> tuple[str, str]:
    """(PTX text, mangled entry name) of `kernel` in `source`."""
    from qwengpu.cuda import compile_cuda, find_entry, parse_ptx  # type: ignore[attr-defined]

    res = compile_cuda(source)
    ptx = res if isinstance(res, str) else res.ptx
    return ptx, find_entry(parse_ptx(ptx), kernel).name


def run_gpu(ptx: str, entry: str, grid: tuple, block: tuple, args: list) -> Outcome:
    """Run on the GPU; a kernel fault (illegal address, ...) is an outcome, not an error."""
    try:
        return Outcome(hardware.run_on_gpu(ptx, entry, grid, block, _copy_args(args)))
    except hardware.GpuLaunchError as exc:
        if exc.is_trap:
            return Outcome(None, trap=exc.error_name)
        raise


# --- report -------------------------------------------------------------------------


@dataclass
class CaseResult:
    """One case: `status` compares the interpreter with the GPU (or the recording)."""

    name: str
    status: str  # match | mismatch | error | recorded | stale | unrecorded
    detail: str = ""
    oracle: str = ""  # match | mismatch | error | "" (not checked)
    oracle_detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in FAILING or self.oracle in FAILING

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "oracle": self.oracle,
            "oracle_detail": self.oracle_detail,
        }


@dataclass
class ConformReport:
    """The outcome of `conform`: mode is "gpu", "replay" or "skipped"."""

    mode: str
    message: str = ""
    device: str = ""
    recording: str = ""
    results: list[CaseResult] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        bad = sum(r.oracle in FAILING for r in self.results)
        if bad:
            out["oracle_failures"] = bad
        return out

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 when every case checked passed, 1 when one failed, NOTHING_CHECKED when no case
        ran (no GPU and no recording, or no case selected): not a pass."""
        if not self.results:
            return NOTHING_CHECKED
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "message": self.message,
            "device": self.device,
            "recording": self.recording,
            "ok": self.ok,
            "counts": self.counts,
            "results": [r.to_dict() for r in self.results],
        }

    def format_text(self) -> str:
        if self.mode == "skipped":
            return f"conform: skipped: {self.message}"
        lines = [f"conform [{self.mode}] {self.device}: {self.message}"]
        for r in self.results:
            tag = r.status if r.status not in FAILING else r.status.upper()
            lines.append(f"  {tag:<10} {r.name}" + (f": {r.detail}" if r.detail else ""))
            if r.oracle in FAILING:
                lines.append(f"  {'ORACLE':<10} {r.name}: {r.oracle}: {r.oracle_detail}")
        summary = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        lines.append(f"{len(self.results)} cases: {summary or 'none'}")
        return "\n".join(lines)


def _oracle_check(case: Any, inputs: list, truth: Outcome, result: CaseResult) -> None:
    """Check the suite's oracle against the hardware outcome (skipped if it traps)."""
    if truth.outputs is None:
        return
    try:
        predicted = case.oracle(_copy_args(inputs))
    except Exception as exc:  # the suite's bug, reported per case
        result.oracle, result.oracle_detail = "error", f"{type(exc).__name__}: {exc}"
        return
    if predicted is None:
        return
    diff = first_difference(truth.outputs, list(predicted), ("GPU", "oracle"))
    result.oracle, result.oracle_detail = ("mismatch", diff) if diff else ("match", "")


def _error(name: str, where: str, exc: BaseException) -> CaseResult:
    return CaseResult(name, "error", f"{where}: {type(exc).__name__}: {exc}")


def _gpu_case(
    case: Any, suite: ModuleType, info: hardware.GpuInfo, compare: bool
) -> tuple[CaseResult, dict[str, Any] | None]:
    name = case.name
    grid, block = _dims(case.grid), _dims(case.block)
    try:
        source = suite.load_source(case)
        inputs = case_args(case)
    except Exception as exc:
        return _error(name, "suite", exc), None
    try:
        ptx, entry = compile_for_gpu(source, case.kernel)
        truth = run_gpu(ptx, entry, grid, block, inputs)
    except Exception as exc:
        return _error(name, "GPU", exc), None
    record: dict[str, Any] = {
        "kernel": case.kernel,
        "entry": entry,
        "grid": list(grid),
        "block": list(block),
        "source_sha256": source_digest(source),
        "inputs": [encode_value(v) for v in inputs],
        "outputs": None if truth.outputs is None else [encode_value(v) for v in truth.outputs],
        "gpu": info.name,
        "sm": info.sm,
        "driver": info.driver,
    }
    if truth.trap is not None:
        record["trap"] = truth.trap
    result = CaseResult(name, "recorded")
    if compare:
        result = _interp_vs(case, suite, source, grid, block, inputs, truth, "GPU")
    _oracle_check(case, inputs, truth, result)
    return result, record


def _interp_vs(
    case: Any,
    suite: ModuleType,
    source: str,
    grid: tuple,
    block: tuple,
    inputs: list,
    truth: Outcome,
    who: str,
) -> CaseResult:
    spec = getattr(case, "spec", None) or getattr(suite, "SPEC", None)
    try:
        got = run_interpreter(source, case.kernel, grid, block, inputs, spec)
    except Exception as exc:
        return _error(case.name, "interpreter", exc)
    diff = compare_outcomes(truth, got, (who, "interpreter"))
    return CaseResult(case.name, "mismatch", diff) if diff else CaseResult(case.name, "match")


def _replay_case(case: Any, suite: ModuleType, rec: dict | None) -> CaseResult:
    name = case.name
    if rec is None:
        return CaseResult(name, "unrecorded", "no entry in the recording")
    try:
        source = suite.load_source(case)
        if rec.get("source_sha256") not in (None, source_digest(source)):
            return CaseResult(name, "stale", "the kernel source changed since it was recorded")
        inputs = [decode_value(v) for v in rec["inputs"]]
        outputs = rec.get("outputs")
        truth = Outcome(
            None if outputs is None else [decode_value(v) for v in outputs], rec.get("trap")
        )
        if truth.outputs is None and truth.trap is None:
            raise QgpuError("entry has neither outputs nor trap")
        grid, block = _dims(rec["grid"]), _dims(rec["block"])
    except Exception as exc:
        return _error(name, "recording", exc)
    result = _interp_vs(case, suite, source, grid, block, inputs, truth, "recorded GPU")
    _oracle_check(case, inputs, truth, result)
    return result


def _select(cases: list, only: Sequence[str] | None) -> list:
    if not only:
        return cases
    names = {c.name for c in cases}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise QgpuError(f"no such case in the suite: {', '.join(unknown)}")
    return [c for c in cases if c.name in set(only)]


def conform(
    suite_path: Path = DEFAULT_SUITE,
    out: Path = DEFAULT_OUT,
    *,
    record: bool = True,
    compare: bool = True,
    replay: bool = False,
    only: Sequence[str] | None = None,
) -> ConformReport:
    """Run the suite on the GPU (record to `out`, compare the interpreter), or replay
    `out` when there is no GPU (or `replay` is set), or skip when there is neither."""
    out = Path(out)
    available, why = (False, "replay requested") if replay else hardware.gpu_available()
    if not available and not out.is_file():
        reason = "--replay" if replay else f"no GPU: {why}"
        return ConformReport("skipped", f"no recording at {out} to replay ({reason})")
    suite = load_suite(Path(suite_path))
    cases = _select(list(suite.CASES), only)

    if available:
        info = hardware.gpu_info()
        old = read_recording(out) if record and out.is_file() else {}  # fail early if bad
        report = ConformReport("gpu", device=info.describe())
        records: dict[str, Any] = {}
        for case in cases:
            result, rec = _gpu_case(case, suite, info, compare)
            report.results.append(result)
            if rec is not None:
                records[case.name] = rec
        if record:
            names = {c.name for c in suite.CASES}
            merged = {k: v for k, v in old.items() if k in names}
            merged.update(records)
            write_recording(out, merged)
            report.recording = str(out)
            report.message = f"{len(records)} cases recorded to {out}"
        else:
            report.message = "not recorded"
        return report

    recording = read_recording(out)
    seen = {
        f"{v.get('gpu', '?')} ({v.get('sm', '?')}, driver {v.get('driver', '?')})"
        for v in recording.values()
        if isinstance(v, dict)
    }
    why_replay = "" if replay else f" (no GPU: {why})"
    report = ConformReport(
        "replay",
        message=f"replaying {out}{why_replay}",
        device="recorded on " + "; ".join(sorted(seen)) if seen else "empty recording",
        recording=str(out),
    )
    for case in cases:
        report.results.append(_replay_case(case, suite, recording.get(case.name)))
    return report


# --- command line -------------------------------------------------------------------


def add_conform_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `qgpu conform`."""
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE, help="suite module (cases.py)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="hardware recording (JSON)")
    parser.add_argument(
        "--replay", action="store_true", help="check the interpreter against the recording only"
    )
    parser.add_argument("--no-record", action="store_true", help="do not write the recording")
    parser.add_argument(
        "--case", action="append", metavar="NAME", help="only this case (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--report", type=Path, metavar="PATH", help="also write the JSON report")


NOTHING_CHECKED = 3
"""`qgpu conform`'s exit code when it checked no case: a script must not read it as a pass."""


def conform_cli(args: argparse.Namespace) -> int:
    """Run `qgpu conform` from parsed arguments; its report's exit code (0: every case
    checked passed, 1: one failed, NOTHING_CHECKED: none was checked)."""
    replay = bool(getattr(args, "replay", False))
    try:
        report = conform(
            Path(getattr(args, "suite", DEFAULT_SUITE)),
            Path(getattr(args, "out", DEFAULT_OUT)),
            record=not replay and not getattr(args, "no_record", False),
            replay=replay,
            only=getattr(args, "case", None),
        )
    except QgpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    as_json = json.dumps(report.to_dict(), indent=2, sort_keys=True)
    if getattr(args, "report", None):
        Path(args.report).write_text(as_json + "\n", encoding="utf-8")
    if getattr(args, "json", False):
        print(as_json)
    else:
        print(report.format_text())
    return report.exit_code


def main(argv: list[str] | None = None) -> int:
    """`python -m qwengpu.host.conform [--suite PATH] [--out PATH] [--replay] [--json]`."""
    parser = argparse.ArgumentParser(prog="qgpu conform", description=__doc__.splitlines()[0])
    add_conform_arguments(parser)
    return conform_cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
