"""The manifest: what a merged checkpoint is bound to, and the checks before using one.

`qwengpu_manifest.json` records the MachineSpec and compiler version the circuit was built
for, where the base came from, the layer map, the muting proof's figures and the size and
sha256 of every other file. `verify_checkpoint` refuses a checkpoint that is not ours, was
built for another machine or compiler, or whose files changed; `load_checkpoint` verifies,
then loads it with plain transformers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from qwengpu.errors import CheckpointError, ModelError
from qwengpu.isa.spec import MachineSpec
from qwengpu.model.atomic import OWNER_FILE

MANIFEST_NAME = "qwengpu_manifest.json"
FORMAT = "qwengpu-checkpoint"
FORMAT_VERSION = 1
QUICK_HASH_LIMIT = 64 << 20  # quick verification hashes files up to this size


def file_sha256(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(16 << 20):
            digest.update(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    return digest.hexdigest()


def file_entries(directory: Path, known: Mapping[str, str] | None = None) -> dict[str, dict]:
    """{name: {bytes, sha256}} for every file but the manifest (`known`: hashes we have)."""
    entries = {}
    for path in sorted(directory.iterdir()):
        if path.name in (MANIFEST_NAME, OWNER_FILE) or not path.is_file():
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
    missing = [key for key in REQUIRED_KEYS if not isinstance(manifest.get(key), dict | str)]
    if missing:
        raise CheckpointError(
            f"{path} lacks {', '.join(repr(k) for k in missing)}; rebuild it with `qgpu build`"
        )
    return manifest


REQUIRED_KEYS = ("machine_spec", "compiler_version", "base", "circuit", "layers", "files")
"""What every manifest `qgpu build` writes holds (a missing one: a damaged manifest)."""


def verify_checkpoint(
    directory: str | Path,
    spec: MachineSpec | None = None,
    compiler_version: str | None = None,
    *,
    deep: bool = False,
    on_bytes: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The manifest of a sound checkpoint, or a CheckpointError saying what is wrong.

    Quick (default): every file present with its recorded size, files up to 64 MB hashed
    (config, tokenizer, index, card). deep=True hashes the weight shards too (`on_bytes`
    hears every chunk read: a progress bar); a shard that fails names its damaged tensors
    (from the manifest's per-tensor checksums).
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
        if (deep or size <= QUICK_HASH_LIMIT) and file_sha256(path, on_bytes) != entry["sha256"]:
            raise CheckpointError(
                f"{directory} is corrupt: {name} does not match its checksum in the manifest"
                + _damaged_tensors(path, manifest.get("tensors") or {})
            )
    return manifest


def _damaged_tensors(path: Path, recorded: Mapping[str, str]) -> str:
    """'; damaged: TENSOR, ...' for the tensors of a safetensors file whose bytes no longer
    match their recorded sha256 ('' when none is recorded or the header is unreadable)."""
    from qwengpu.model.safetensors_io import read_header

    if not recorded or not path.name.endswith(".safetensors"):
        return ""
    try:
        tensors, _ = read_header(path)
    except (CheckpointError, ModelError, KeyError, TypeError, ValueError):
        return "; its header is unreadable"
    damaged = []
    with path.open("rb") as f:
        for name, t in tensors.items():
            if name not in recorded:
                continue
            f.seek(t.start)
            digest = hashlib.sha256()
            left = t.nbytes
            while left > 0:
                chunk = f.read(min(left, 16 << 20))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
            if digest.hexdigest() != recorded[name]:
                damaged.append(name)
    if not damaged:
        return ""
    more = f" and {len(damaged) - 3} more" if len(damaged) > 3 else ""
    return f"; damaged: {', '.join(damaged[:3])}{more}"


def verify_bar(manifest: Mapping[str, Any]) -> Any:
    """A progress bar over the bytes of the manifest's files, on a terminal only."""
    from tqdm.auto import tqdm

    total = sum(int(entry.get("bytes", 0)) for entry in manifest["files"].values())
    return tqdm(
        total=total, unit="B", unit_scale=True, desc="qgpu: verifying", leave=False, disable=None
    )


def verified_stamp(directory: Path) -> Path:
    """Where a deep verification of `directory` is remembered (the user cache)."""
    from qwengpu.model.tokenizer import cache_root

    key = hashlib.sha256(str(Path(directory).absolute()).encode()).hexdigest()[:32]
    return cache_root() / "verified" / f"{key}.json"


def _fingerprint(directory: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Every listed file's size and modification time, and the manifest's own bytes."""
    files = {}
    for name in manifest["files"]:
        stat = (directory / name).stat()
        files[name] = [stat.st_size, stat.st_mtime_ns]
    manifest_bytes = (directory / MANIFEST_NAME).read_bytes()
    return {"manifest": hashlib.sha256(manifest_bytes).hexdigest(), "files": files}


def is_verified(directory: Path, manifest: Mapping[str, Any]) -> bool:
    """Whether a deep verification of `directory` passed and nothing changed since (each
    file's size and mtime, the manifest's bytes)."""
    stamp = verified_stamp(directory)
    try:
        return json.loads(stamp.read_text()) == _fingerprint(directory, manifest)
    except (OSError, ValueError):
        return False


def remember_verified(directory: Path, manifest: Mapping[str, Any]) -> None:
    """Record that `directory` passed a deep verification (best effort: a cache that
    cannot be written only costs another verification)."""
    stamp = verified_stamp(directory)
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(_fingerprint(directory, manifest)))
    except OSError:
        pass


def load_checkpoint(
    directory: str | Path,
    spec: MachineSpec | None = None,
    compiler_version: str | None = None,
    *,
    dtype: str = "bfloat16",
    vision: bool = False,
    deep: bool = False,
    on_bytes: Callable[[int], None] | None = None,
    layers: int | None = None,
):
    """(model, tokenizer, manifest) of a verified checkpoint, loaded with plain transformers.

    The first load of a checkpoint (and the first after any of its files changed: size,
    mtime) checks every file's checksum (`on_bytes` hears the bytes read), remembered in
    the user cache; deep=True checks them again. vision=True loads the image-text class
    (vision layout only); otherwise the causal LM. `layers` loads only the first that
    many decoder layers (the circuit's, for launches that stop after it), leaving the
    others' tensors on disk.
    """
    import torch
    from safetensors import SafetensorError
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoTokenizer,
    )

    if dtype not in ("bfloat16", "float32"):
        raise CheckpointError(
            f"dtype {dtype} is not supported: the circuit is exact in bfloat16 and float32 "
            "only (float16 overflows its constants)"
        )
    directory = Path(directory)
    manifest = verify_checkpoint(directory, spec, compiler_version)  # quick: fails fast
    if deep or not is_verified(directory, manifest):  # every checksum, once per change
        with verify_bar(manifest) as bar:
            manifest = verify_checkpoint(
                directory, spec, compiler_version, deep=True, on_bytes=on_bytes or bar.update
            )
        remember_verified(directory, manifest)
    if vision and manifest.get("base", {}).get("layout") != "vlm":
        raise CheckpointError(f"{directory} is a text-only checkpoint: it has no vision tower")
    cls = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    try:
        config = AutoConfig.from_pretrained(str(directory))
        if layers is not None:
            text = getattr(config, "text_config", config)
            text.num_hidden_layers = layers
            text.layer_types = list(text.layer_types[:layers])
        with _quiet_transformers():  # the layers left out are "unused weights" to it
            model = cls.from_pretrained(str(directory), config=config, dtype=getattr(torch, dtype))
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CheckpointError(
            f"{directory}: transformers cannot load it ({type(exc).__name__}: {first}); "
            "`qgpu verify` checks every file"
        ) from None
    model.eval()
    return model, tokenizer, manifest


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings off for one load (errors still raise)."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)
