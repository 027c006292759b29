"""The manifest: what a merged checkpoint is bound to, and the checks before using one.

`qwengpu_manifest.json` records the MachineSpec and compiler version the circuit was built
for, where the base came from, the layer map, the muting proof's figures and the size and
sha256 of every other file. `verify_checkpoint` refuses a checkpoint that is not ours, was
built for another machine or compiler, or whose files changed; `load_checkpoint` verifies,
then loads it with plain transformers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from qwengpu.errors import CheckpointError
from qwengpu.isa.spec import MachineSpec

MANIFEST_NAME = "qwengpu_manifest.json"
FORMAT = "qwengpu-checkpoint"
FORMAT_VERSION = 1
QUICK_HASH_LIMIT = 64 << 20  # quick verification hashes files up to this size


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(16 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def file_entries(directory: Path, known: Mapping[str, str] | None = None) -> dict[str, dict]:
    """{name: {bytes, sha256}} for every file but the manifest (`known`: hashes we have)."""
    entries = {}
    for path in sorted(directory.iterdir()):
        if path.name == MANIFEST_NAME or not path.is_file():
            continue
        sha = (known or {}).get(path.name) or file_sha256(path)
        entries[path.name] = {"bytes": path.stat().st_size, "sha256": sha}
    return entries


def spec_dict(spec: MachineSpec) -> dict[str, int]:
    return asdict(spec)


def spec_from_dict(data: Mapping[str, Any]) -> MachineSpec:
    names = {f.name for f in fields(MachineSpec)}
    unknown = set(data) - names
    if unknown:
        raise CheckpointError(f"manifest MachineSpec has unknown fields {sorted(unknown)}")
    try:
        return MachineSpec(**data)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"manifest MachineSpec is invalid: {exc}") from None


def read_manifest(directory: Path) -> dict[str, Any]:
    path = Path(directory) / MANIFEST_NAME
    if not Path(directory).is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    if not path.is_file():
        raise CheckpointError(
            f"{directory} is not a qwengpu checkpoint (no {MANIFEST_NAME}); "
            "build one with `qgpu build`"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(f"{path} is corrupt (not JSON); rebuild the checkpoint") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a qwengpu manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{directory}: checkpoint format {manifest.get('format_version')} is not the "
            f"{FORMAT_VERSION} this qwengpu reads; rebuild it with `qgpu build`"
        )
    return manifest


def verify_checkpoint(
    directory: str | Path,
    spec: MachineSpec | None = None,
    compiler_version: str | None = None,
    *,
    deep: bool = False,
) -> dict[str, Any]:
    """The manifest of a sound checkpoint, or a CheckpointError saying what is wrong.

    Quick (default): every file present with its recorded size, files up to 64 MB hashed
    (config, tokenizer, index, card). deep=True hashes the weight shards too.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    built_for = spec_from_dict(manifest.get("machine_spec", {}))
    if spec is not None and built_for != spec:
        raise CheckpointError(
            f"{directory} was built for a different machine: {built_for.describe()}; this "
            f"qgpu runs {spec.describe()}. Rebuild it with `qgpu build`."
        )
    built_with = manifest.get("compiler_version")
    if compiler_version is not None and built_with != compiler_version:
        raise CheckpointError(
            f"{directory} was built by circuit compiler {built_with!r}, this qgpu has "
            f"{compiler_version!r}. Rebuild it with `qgpu build`."
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or "config.json" not in files:
        raise CheckpointError(f"{directory}: manifest lists no files")
    for name, entry in files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{directory} is incomplete: {name} is missing")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise CheckpointError(
                f"{directory} is corrupt: {name} has {size} bytes, the manifest says "
                f"{entry['bytes']}"
            )
        if (deep or size <= QUICK_HASH_LIMIT) and file_sha256(path) != entry["sha256"]:
            raise CheckpointError(
                f"{directory} is corrupt: {name} does not match its checksum in the manifest"
            )
    return manifest


def load_checkpoint(
    directory: str | Path,
    spec: MachineSpec | None = None,
    compiler_version: str | None = None,
    *,
    dtype: str = "bfloat16",
    vision: bool = False,
    deep: bool = False,
):
    """(model, tokenizer, manifest) of a verified checkpoint, loaded with plain transformers.

    vision=True loads the image-text class (vision layout only); otherwise the causal LM.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    if dtype not in ("bfloat16", "float32"):
        raise CheckpointError(
            f"dtype {dtype} is not supported: the circuit is exact in bfloat16 and float32 "
            "only (float16 overflows its constants)"
        )
    manifest = verify_checkpoint(directory, spec, compiler_version, deep=deep)
    if vision and manifest.get("base", {}).get("layout") != "vlm":
        raise CheckpointError(f"{directory} is a text-only checkpoint: it has no vision tower")
    cls = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model = cls.from_pretrained(str(directory), dtype=getattr(torch, dtype))
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    return model, tokenizer, manifest
