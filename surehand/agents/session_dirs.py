"""Session directories: private to their session, written without following links, removed
after ``SUREHAND_SESSION_RETENTION_SECONDS``.

A session directory (``<work_dir>/<attempt_id>/``) is mode 0700 and its files 0600, owned by
the agent's user when agents run as one (``SUREHAND_AGENT_USER``). It holds ``TASK.md``, the MCP
config files, a ``home/`` for the program and whatever the program writes. The worker's own
records sit beside it, never in it: the group records (``.agent-groups/``) and the captured
outputs (``.outputs/``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path

from surehand.agents.outputs import OUTPUTS_DIR

SWEEP_EVERY_SECONDS = 60.0
_OPEN_WRITE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_swept: dict[Path, float] = {}
_sweep_lock = threading.Lock()


def make_private(directory: Path) -> Path:
    """Create ``directory`` (and its parents) with mode 0700; return it resolved."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    return directory.resolve()


def write_private(directory: Path, name: str, text: str) -> Path:
    """Write ``text`` to ``directory/name`` (mode 0600), never through a link."""
    path = directory / name
    fd = os.open(path, _OPEN_WRITE, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return path


def give_to(directory: Path, owner: tuple[int, int] | None) -> None:
    """Hand ``directory`` and what is in it to the agent's user (``owner``: uid, gid)."""
    if owner is None:
        return
    for root, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            os.chown(os.path.join(root, name), *owner, follow_symlinks=False)
    os.chown(directory, *owner, follow_symlinks=False)


def sweep(work_dir: Path, *, retention: float, keep: set[str]) -> list[str]:
    """Remove finished sessions' directories (and their captured outputs) last changed more
    than ``retention`` seconds ago; never one named in ``keep`` (this process's running
    sessions). At most once a minute per work directory; returns the names removed."""
    now = time.time()
    with _sweep_lock:
        if now - _swept.get(work_dir, 0.0) < SWEEP_EVERY_SECONDS:
            return []
        _swept[work_dir] = now
    removed = []
    for parent in (work_dir, work_dir / OUTPUTS_DIR):
        for entry in _old_entries(parent, now - retention, keep):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _old_entries(parent: Path, before: float, keep: set[str]) -> list[Path]:
    found = []
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            if entry.name.startswith(".") or entry.name in keep:
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime < before:
                    found.append(entry)
    return found
