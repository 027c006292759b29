"""Peak memory and time of `qgpu build` (issue 5: the 2B build must fit in 16 GB of RAM).

    uv run python benchmarks/build_memory.py                 # synthetic:2b, the machine
    uv run python benchmarks/build_memory.py --base synthetic:0.8b --circuit passthrough

Each phase runs in its own process so that its peak RSS is its own: (1) getting the base
(for synthetic:* this generates it into the qwengpu cache, once), (2) the build itself,
streamed layer by layer into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIMIT_GB = 16.0


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _status_gb(field: str) -> float:
    """A /proc/self/status memory figure (Linux), in GB; 0 where unavailable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _phase(args: argparse.Namespace) -> None:
    from qwengpu.model.base import resolve_base
    from qwengpu.model.merge import build_checkpoint

    started = time.monotonic()

    def say(message: str) -> None:
        rss, peak = _status_gb("VmRSS"), _status_gb("VmHWM")
        print(
            f"  {time.monotonic() - started:7.1f} s  rss {rss:5.2f} GB (peak {peak:5.2f})  "
            f"{message}",
            file=sys.stderr,
        )

    if args.phase == "base":
        base = resolve_base(args.base, progress=say)
        detail = base.describe()
    else:
        from qwengpu.model.cli import circuit_compiler

        result = build_checkpoint(
            args.base,
            Path(args.out),
            circuit_compiler(args.circuit),
            progress=say,
        )
        size = sum(p.stat().st_size for p in result.path.iterdir())
        detail = f"{result.path} ({size / 1e9:.2f} GB)"
    print(
        json.dumps({"seconds": time.monotonic() - started, "peak_gb": _peak_gb(), "detail": detail})
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="synthetic:2b")
    parser.add_argument("--out", help="where to build (default: a temporary directory)")
    parser.add_argument("--circuit", default="machine", help="machine (default) or passthrough")
    parser.add_argument("--keep", action="store_true", help="keep the built checkpoint")
    parser.add_argument("--phase", choices=("base", "build"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        _phase(args)
        return 0

    scratch = Path(tempfile.mkdtemp(prefix="qgpu-bench-"))
    out = Path(args.out) if args.out else scratch / "checkpoint"
    worst = 0.0
    try:
        for phase in ("base", "build"):
            command = [
                sys.executable,
                __file__,
                "--phase",
                phase,
                "--base",
                args.base,
                "--out",
                str(out),
                "--circuit",
                args.circuit,
            ]
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            worst = max(worst, figures["peak_gb"]) if phase == "build" else worst
            print(
                f"{phase:5s}: {figures['seconds']:8.1f} s, peak RSS "
                f"{figures['peak_gb']:6.2f} GB  {figures['detail']}"
            )
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    verdict = "within" if worst < LIMIT_GB else "OVER"
    print(f"build peak RSS {worst:.2f} GB: {verdict} the {LIMIT_GB:g} GB budget")
    return 0 if worst < LIMIT_GB else 1


if __name__ == "__main__":
    sys.exit(main())
