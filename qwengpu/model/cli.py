"""`qgpu build` and `qgpu drift`: argument parsers and commands (wired into qwengpu/cli)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from importlib import import_module
from pathlib import Path

from qwengpu.errors import ModelError
from qwengpu.model.defaults import default_base

# name -> "module:attribute" of a CircuitCompiler (a class or a ready instance)
CIRCUITS = {
    "machine": "qwengpu.model.machine_circuit:MachineCircuitCompiler",
    "passthrough": "qwengpu.model.passthrough:PassthroughCircuit",
}
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.I)


def parse_size(text: str) -> int:
    """'2GB', '500MB', '1.5G', '4096' -> bytes (powers of 1024)."""
    match = SIZE.match(text)
    if not match:
        raise ModelError(f"size '{text}': expected e.g. 2GB, 500MB or a byte count")
    scale = 1024 ** "BKMGT".index((match[2] or "B").upper())
    return int(float(match[1]) * scale)


def circuit_compiler(name: str):
    """The circuit compiler registered as `name`."""
    if name not in CIRCUITS:
        raise ModelError(f"unknown circuit '{name}' (known: {', '.join(CIRCUITS)})")
    module_name, attribute = CIRCUITS[name].split(":")
    factory = getattr(import_module(module_name), attribute)
    return factory() if isinstance(factory, type) else factory


def _say(message: str) -> None:
    print(f"qgpu: {message}", file=sys.stderr)


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base",
        default=None,
        help="Qwen3.5 base: a hub id (Qwen/Qwen3.5-2B), a local HF directory, or "
        "synthetic:tiny|0.8b|2b|4b[,text][,untied] (default: $QWENGPU_BASE or Qwen/Qwen3.5-2B)",
    )
    parser.add_argument("--out", required=True, help="directory to create (atomically)")
    parser.add_argument("--revision", help="hub revision (branch, tag or commit)")
    parser.add_argument(
        "--circuit", default="machine", choices=sorted(CIRCUITS), help="circuit to compile in"
    )
    parser.add_argument("--shard-size", default="2GB", help="max safetensors shard (default 2GB)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing checkpoint")
    parser.add_argument(
        "--calibration",
        metavar="FILE",
        help="text to measure the circuit tokens' rows on (default: the shipped multilingual "
        "sample); the build refuses if a circuit token would win the argmax on it",
    )
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON")


def build_cli(args: argparse.Namespace) -> int:
    from qwengpu.model.merge import build_checkpoint

    compiler = circuit_compiler(args.circuit)
    try:
        result = build_checkpoint(
            args.base or default_base(),
            Path(args.out),
            compiler,
            revision=args.revision,
            max_shard_bytes=parse_size(args.shard_size),
            overwrite=args.overwrite,
            progress=_say,
            calibration=args.calibration,
        )
    except KeyboardInterrupt:
        _say("interrupted: nothing was written")
        return 130
    manifest = result.manifest
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    layers = manifest["layers"]
    muting = manifest["muting"]
    print(f"checkpoint: {result.path}")
    print(f"layers: {layers['circuit'][1]} circuit + {manifest['base']['num_layers']} base")
    print(f"circuit tokens: {len(manifest['circuit']['tokens'])}")
    print(
        f"muting: {muting['gate_matrices_checked']} gate matrices proven below "
        f"{muting['threshold']:g} on every text row (worst {muting['worst_gate_bound']:.4g})"
    )
    text = manifest["circuit"].get("text_margin")
    if text is not None:
        print(
            f"text: circuit tokens at least {text['margin_min']:.3g} nats below the base's top "
            f"logit on {text['positions']} calibration positions (mass at most "
            f"{text['circuit_mass_max']:.3g} without suppress_tokens)"
        )
    print(f"built in {result.seconds:.1f} s")
    return 0


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a checkpoint directory from `qgpu build`")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def verify_cli(args: argparse.Namespace) -> int:
    """Every file's checksum against the manifest, streamed with a progress bar; a pass is
    remembered, so loading the checkpoint skips its own first-load verification."""
    from qwengpu.model.manifest import (
        read_manifest,
        remember_verified,
        verify_bar,
        verify_checkpoint,
    )

    directory = Path(args.model)
    listed = read_manifest(directory)
    files = listed["files"]
    total = sum(int(entry.get("bytes", 0)) for entry in files.values())
    with verify_bar(listed) as bar:
        manifest = verify_checkpoint(directory, deep=True, on_bytes=bar.update)
    remember_verified(directory, manifest)
    if args.json:
        report = {"model": str(directory), "files": len(files), "bytes": total, "ok": True}
        print(json.dumps(report))
    else:
        print(f"{directory}: {len(files)} files, {total / 2**30:.2f} GiB: every checksum matches")
    return 0


def add_drift_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base", default=None, help="the base (as for qgpu build; default $QWENGPU_BASE)"
    )
    parser.add_argument("--model", required=True, help="the merged checkpoint directory")
    parser.add_argument("--text", help="UTF-8 text file to compare on (default: built-in mix)")
    parser.add_argument(
        "--dtype", default="both", choices=("bfloat16", "float32", "both"), help="default both"
    )
    parser.add_argument("--max-tokens", type=int, default=1024, help="per text (default 1024)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def drift_cli(args: argparse.Namespace) -> int:
    from qwengpu.model.base import resolve_base
    from qwengpu.model.drift import DEFAULT_TEXT, measure_drift
    from qwengpu.model.manifest import verify_checkpoint

    manifest = verify_checkpoint(args.model)
    base_name = args.base or manifest["base"]["source"] or default_base()
    base = resolve_base(base_name, manifest["base"].get("revision"), _say)
    if args.text:
        try:
            texts = [Path(args.text).read_text(encoding="utf-8")]
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"cannot read --text {args.text}: {exc}") from None
    else:
        texts = [DEFAULT_TEXT]
    dtypes = ("bfloat16", "float32") if args.dtype == "both" else (args.dtype,)
    reports = measure_drift(base.directory, args.model, texts, dtypes, args.max_tokens)
    if args.json:
        print(
            json.dumps(
                {"base": base_name, "model": args.model, "reports": [r.as_dict() for r in reports]},
                indent=2,
            )
        )
    else:
        print(f"drift of {args.model} against {base_name}:")
        for report in reports:
            print("  " + report.line())
    return 0 if all(r.logits_identical for r in reports) else 2
