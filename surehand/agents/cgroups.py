"""A control group per session: a cap on its processes and memory, and a way to kill all of it.

Resource limits per process (``setrlimit``) do not bound a session: ``RLIMIT_NPROC`` counts a
whole user's processes and never binds uid 0, and ``RLIMIT_AS`` caps each process's address
space, not what they hold together. A cgroup does both, for the trampoline and everything it
starts (membership is inherited, whatever a process does: ``setsid``, double forks, namespaces),
and its member list is how a session's stragglers are found and killed.

cgroup v1 (``pids`` and ``memory`` hierarchies, as on hybrid hosts) and v2 (one hierarchy, where
this process's cgroup delegates ``pids`` and ``memory``) are supported. Each session's cgroup is
``<this process's cgroup>/surehand/<name>`` in every hierarchy used. Creating it needs write
access there (a root worker, or a delegated subtree); where that is missing the session runs
without one, and :func:`availability` says why (``surehand check``, the worker's start line).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
GROUP = "surehand"
KILL_SECONDS = 10.0  # how long a kill may take to empty a cgroup (processes in uninterruptible I/O)
_POLL = 0.02


@dataclass(frozen=True)
class Limits:
    """What one session's programs may use together."""

    memory_bytes: int
    max_processes: int


@dataclass(frozen=True)
class SessionCgroup:
    """One session's cgroup, one directory per hierarchy it uses."""

    directories: tuple[Path, ...]

    @property
    def procs_files(self) -> list[Path]:
        """The files a process writes its pid to, to join (the trampoline does, first)."""
        return [directory / "cgroup.procs" for directory in self.directories]

    def pids(self) -> set[int]:
        """The live members (a process of this session, wherever it moved itself)."""
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(line) for line in procs.read_text().split())
        return found

    def kill(self, timeout: float = KILL_SECONDS) -> bool:
        """SIGKILL every member until none is left; whether it emptied within ``timeout``.

        A member that forks between the listing and its kill leaves a child in the cgroup,
        which the next round finds: the process cap bounds how long that can go on."""
        deadline = time.monotonic() + timeout
        while members := self.pids():
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL)
        return True

    def remove(self) -> None:
        """Remove the (empty) cgroup; one that still has members is left for the next sweep."""
        for directory in self.directories:
            with contextlib.suppress(OSError):
                directory.rmdir()

    @classmethod
    def create(cls, name: str, limits: Limits) -> SessionCgroup | None:
        """A new cgroup ``name`` with ``limits`` in every hierarchy that takes one; None where
        none does (see :func:`availability`)."""
        made: list[Path] = []
        try:
            for parent, files in _hierarchies(limits):
                directory = parent / name
                directory.mkdir(mode=0o755, parents=True, exist_ok=True)
                made.append(directory)
                for file_name, value in files.items():
                    (directory / file_name).write_text(value)
        except OSError:
            SessionCgroup(tuple(made)).remove()
            return None
        return cls(tuple(made)) if made else None


def _hierarchies(limits: Limits) -> Iterator[tuple[Path, dict[str, str]]]:
    """(parent directory of session cgroups, limit files) for each hierarchy to use."""
    mine = _own_cgroups()
    if (ROOT / "cgroup.controllers").exists():  # v2 only
        yield (
            _under(ROOT, mine.get("")),
            {
                "pids.max": str(limits.max_processes),
                "memory.max": str(limits.memory_bytes),
            },
        )
        return
    yield _under(ROOT / "pids", mine.get("pids")), {"pids.max": str(limits.max_processes)}
    yield (
        _under(ROOT / "memory", mine.get("memory")),
        {"memory.limit_in_bytes": str(limits.memory_bytes)},
    )


def _under(mount: Path, own: str | None) -> Path:
    if own is None or not mount.is_dir():
        raise OSError(errno.ENOENT, "no such cgroup hierarchy", str(mount))
    return mount / own.lstrip("/") / GROUP


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per controller (``""``: the v2 hierarchy), from /proc."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = path
    return found


def availability(limits: Limits) -> str | None:
    """None if session cgroups can be made here, else why not (made and removed to find out)."""
    probe = SessionCgroup.create(f"probe-{os.getpid()}", limits)
    if probe is None:
        return (
            "no writable pids and memory cgroup for this process (run the worker as root or in "
            "a delegated cgroup): limits are per process (setrlimit) and no cgroup lists a "
            "session's stragglers"
        )
    probe.remove()
    return None


def sweep_empty(older_than: float = 60.0) -> None:
    """Remove the empty session cgroups a killed worker left behind (at worker start). Only
    those older than ``older_than`` seconds: a new one may be about to take its trampoline."""
    now = time.time()
    with contextlib.suppress(OSError):
        for parent, _files in _hierarchies(Limits(0, 0)):
            for directory in parent.iterdir() if parent.is_dir() else ():
                with contextlib.suppress(OSError):
                    if directory.is_dir() and now - directory.stat().st_mtime > older_than:
                        directory.rmdir()  # refused while it has members
