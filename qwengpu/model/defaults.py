"""The default checkpoint: what `qgpu run --backend model` uses when no --model is given.

It lives in qwengpu's user cache, one per (base, MachineSpec, compiler version), and is
built on first use from the base named by --base, else $QWENGPU_BASE, else
Qwen/Qwen3.5-2B. A cached checkpoint that no longer matches the compiler (or fails its
checks) is rebuilt, saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from qwengpu.errors import CheckpointError, ModelError
from qwengpu.model.base import HUB_ID, Progress, format_bytes, hub_offline
from qwengpu.model.circuit_layers import CircuitCompiler
from qwengpu.model.manifest import spec_dict, verify_checkpoint
from qwengpu.model.tokenizer import cache_root

DEFAULT_BASE = "Qwen/Qwen3.5-2B"


def default_base() -> str:
    """$QWENGPU_BASE, else Qwen/Qwen3.5-2B."""
    return os.environ.get("QWENGPU_BASE") or DEFAULT_BASE


def default_checkpoint(compiler: CircuitCompiler, base: str | None = None) -> Path:
    """Where the default checkpoint for `base` and `compiler` lives (it may not exist yet)."""
    base = base or default_base()
    key = json.dumps(
        {
            "base": base,
            "spec": spec_dict(compiler.spec) if compiler.spec else "geometry preset",
            "compiler": compiler.compiler_version,
        },
        sort_keys=True,
    )
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", base).strip("-")[:60]
    version = re.sub(r"[^A-Za-z0-9.]+", "-", compiler.compiler_version)[:40]
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return cache_root() / "checkpoints" / f"{slug}--{version}--{digest}"


def ensure_checkpoint(
    compiler: CircuitCompiler,
    base: str | None = None,
    *,
    progress: Progress | None = None,
) -> Path:
    """The default checkpoint, verified; built first if missing or unusable."""
    from qwengpu.model.merge import build_checkpoint

    say = progress or (lambda _: None)
    base = base or default_base()
    path = default_checkpoint(compiler, base)
    if path.exists():
        try:
            verify_checkpoint(path, compiler.spec, compiler.compiler_version)
            return path
        except CheckpointError as exc:
            say(f"the cached checkpoint is unusable ({exc}); rebuilding it")
    say(f"no model checkpoint yet: building one from {base} at {path} ({_download_note(base)})")
    build_checkpoint(base, path, compiler, overwrite=path.exists(), progress=say)
    return path


def _download_note(base: str) -> str:
    if base.startswith("synthetic:"):
        return "synthetic base, nothing to download"
    if Path(base).expanduser().is_dir():
        return "local base, nothing to download"
    if not HUB_ID.match(base):
        return "unknown base"
    if hub_offline():
        return "offline: the base must already be in the Hugging Face cache"
    from qwengpu.model.base import hub_download_size

    try:
        total, missing = hub_download_size(base)
    except ModelError:
        return "download size unknown: the hub did not answer"
    if not missing:
        return f"{format_bytes(total)} already in the Hugging Face cache"
    return f"downloads {format_bytes(missing)} from the Hugging Face Hub"
