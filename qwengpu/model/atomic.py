"""Directories that appear whole or not at all: build in a temporary sibling, then rename."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def work_dir(target: Path) -> Path:
    """A fresh temporary directory beside `target` (same filesystem, so rename is atomic),
    with the permissions a plain mkdir would give (mkdtemp's are 0700)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(work, 0o777 & ~mask)
    return work


def commit_dir(work: Path, target: Path) -> None:
    """Move a finished `work` directory to `target`; an existing target is replaced only
    once the new one is complete (the old one goes aside first, then is deleted)."""
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.replace(work, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.replace(target, old / "previous")
    os.replace(work, target)
    shutil.rmtree(old, ignore_errors=True)
