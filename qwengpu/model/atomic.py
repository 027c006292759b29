"""Directories that appear whole or not at all: build in a temporary sibling, then rename.

A build that dies (SIGKILL, a crash, a power cut) leaves its temporary sibling behind; each
holds its builder's process id and host, so the next build into the same place removes the
ones whose builder is gone. SIGTERM is turned into the interrupt SIGINT raises while a
build runs, so its own cleanup removes its directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

OWNER_FILE = ".qgpu-builder"  # "pid host" of the process writing a temporary directory


def work_dir(target: Path) -> Path:
    """A fresh temporary directory beside `target` (same filesystem, so rename is atomic),
    with the permissions a plain mkdir would give (mkdtemp's are 0700); the temporary
    directories of dead builds of `target` are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_work(target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(work, 0o777 & ~mask)
    (work / OWNER_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    return work


def remove_dead_work(target: Path) -> list[Path]:
    """Remove the temporary siblings of `target` whose builder (on this host) has exited;
    returns them. Another host's, or one without an owner file, is left alone."""
    removed = []
    for stale in target.parent.glob(f".{target.name}.tmp-*"):
        owner = stale / OWNER_FILE
        try:
            pid, host = owner.read_text().split()
        except (OSError, ValueError):
            continue
        if host == socket.gethostname() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM raises KeyboardInterrupt as SIGINT does (in the main
    thread; elsewhere nothing changes), so a build's cleanup runs on both."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL or not _main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def disown(work: Path) -> None:
    """Remove the owner mark of a finished `work` directory (before it takes its name)."""
    (work / OWNER_FILE).unlink(missing_ok=True)


def commit_dir(work: Path, target: Path) -> None:
    """Move a finished `work` directory to `target`; an existing target is replaced only
    once the new one is complete (the old one goes aside first, then is deleted)."""
    disown(work)
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        os.replace(work, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.replace(target, old / "previous")
    os.replace(work, target)
    shutil.rmtree(old, ignore_errors=True)
