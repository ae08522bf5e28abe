"""How much disk a session may fill, and whether the worker has room for another session.

**Quota.** A session may add at most ``SUREHAND_AGENT_DISK_MIB`` of disk and
``SUREHAND_AGENT_DISK_FILES`` files and directories to what it can write and the worker keeps
for it: its session directory, its captured outputs and its per-TASK clone (the places under
the work directory; a shared workspace or an operator's writable bind is nobody's alone and
counted in no session's quota). Its sandbox's ``/tmp``, ``/dev/shm`` and ``/run`` count in the
files too (their bytes are bounded by their size): seen through a process inside the sandbox,
and only its own tmpfs mounts, never a file system of the host's (while bubblewrap sets the
sandbox up, its process still sees the host's ``/tmp``, whose ``statvfs`` counts every file of
the host's disk). What is there when the program starts is the baseline: a successor's
worktree does not count against it.

A thread per worker process (:mod:`surehand.agents.quota_watch`) measures every running
session, in rounds every ``SUREHAND_AGENT_QUOTA_CHECK_SECONDS`` (longer when rounds are costly)
and at once when a file system the sessions write on loses more than one of them may still
add; and once more when all of a session's program has stopped. A session found over its
quota, or with a directory the worker cannot measure (a failure of the watch blocks the agent,
never lets it through), is killed at once, its session directory removed, and it ends
*interrupted* with cause ``quota_exceeded`` (also one that ended between two rounds: its
result is not taken): its TASK goes through admission like any interruption, and the
attempt's error says what was measured.

What it cannot promise: it watches, the kernel does not enforce. A program writes as fast as
the disk takes it until the watch sees it (a tick, and a round's walk), so a session can pass
its quota by that much before it is stopped and its directory removed (``bench/agents/quota.py``
measures it; each file is also capped by ``SUREHAND_AGENT_FILE_SIZE_MIB``). Keep
``SUREHAND_WORK_DIR_MIN_FREE_MIB`` above the worker's concurrency times the quota, and the
work directory off the store's file system (compose/DEPLOYMENT.md).

**Free space.** Before it claims a TASK, a worker looks at the free space and files of the
work directory's file system: below ``SUREHAND_WORK_DIR_MIN_FREE_MIB`` or
``SUREHAND_WORK_DIR_MIN_FREE_FILES`` it claims nothing and raises :class:`NoSpaceForSessions`
(retryable): the TASK stays in ``inbox`` untouched, for later or for another worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from surehand.agents.groups import start_time
from surehand.config import Settings
from surehand.errors import NoSpaceForSessions, SessionInterrupted
from surehand.model import AttemptCause

log = logging.getLogger(__name__)

MIB = 1024 * 1024
TMPFS = ("tmp", "dev/shm", "run")  # the sandbox's own, measured through /proc/PID/root


@dataclass(frozen=True)
class Quota:
    """What one session may add: disk bytes and files (inodes)."""

    disk_bytes: int
    files: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Quota:
        return cls(settings.agent_disk_mib * MIB, settings.agent_disk_files)

    def describe(self) -> str:
        return f"{self.disk_bytes // MIB} MiB and {self.files} files"


@dataclass(frozen=True)
class Usage:
    """What a session's places hold: disk bytes (allocated blocks) and files."""

    disk_bytes: int = 0
    files: int = 0

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.disk_bytes - other.disk_bytes, self.files - other.files)

    def over(self, quota: Quota) -> str | None:
        """Why this is over ``quota`` (None: within it)."""
        if self.disk_bytes > quota.disk_bytes:
            return (
                f"it added {self.disk_bytes / MIB:.0f} MiB, over its "
                f"{quota.disk_bytes // MIB} MiB (SUREHAND_AGENT_DISK_MIB)"
            )
        if self.files > quota.files:
            return (
                f"it added {self.files} files and directories, over its {quota.files} "
                "(SUREHAND_AGENT_DISK_FILES)"
            )
        return None


class Unmeasurable(OSError):
    """A directory of the session could not be read: the watch cannot vouch for it."""


def measure(roots: Sequence[Path], stop_past: Usage | None = None) -> Usage:
    """Allocated bytes and entries under ``roots`` (each root included), without following
    links or leaving a root's file system; a file with several links counts once. With
    ``stop_past``, what was found as soon as it is past either of its numbers (a flood is
    found without walking all the rest). :class:`Unmeasurable` for a directory that cannot
    be read."""
    total, files, seen = 0, 0, set()
    for root in roots:
        with contextlib.suppress(FileNotFoundError):
            info = root.lstat()
            for directory_entries in _entries(root, info):
                for found in directory_entries:
                    if found.st_nlink > 1 and not stat.S_ISDIR(found.st_mode):
                        if (found.st_dev, found.st_ino) in seen:
                            continue
                        seen.add((found.st_dev, found.st_ino))
                    total += found.st_blocks * 512
                    files += 1
                if stop_past and (total > stop_past.disk_bytes or files > stop_past.files):
                    return Usage(total, files)
    return Usage(total, files)


def _entries(root: Path, info: os.stat_result) -> Iterator[list[os.stat_result]]:
    """The root's own status, then each directory's entries, one list per directory."""
    yield [info]
    pending = [str(root)] if stat.S_ISDIR(info.st_mode) else []
    while pending:
        directory, found = pending.pop(), []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    with contextlib.suppress(FileNotFoundError):
                        found.append(entry_info := entry.stat(follow_symlinks=False))
                        if stat.S_ISDIR(entry_info.st_mode) and entry_info.st_dev == info.st_dev:
                            pending.append(entry.path)
        except FileNotFoundError:
            continue  # removed while measured
        except OSError as error:
            why = f"cannot measure {directory}: {error.strerror}"
            raise Unmeasurable(error.errno, why) from error
        yield found


def tmpfs_files(root: int) -> int:
    """Files in the sandbox's own tmpfs mounts, seen from ``root`` (a descriptor of the root
    directory of a process inside it).

    Only a mount of the sandbox's own counts: a place on the root's file system, or on one the
    worker itself has at ``/``, ``/tmp``, ``/dev/shm`` or ``/run``, is the host's (a ``statvfs``
    of it would count every file of that file system), and no link is followed to find one
    (an absolute link would be resolved in the worker's view)."""
    if _same_file(os.fstat(root), os.stat("/")):
        return 0  # the worker's own root: bubblewrap has not pivoted into the view yet
    foreign = {os.fstat(root).st_dev, *_host_devices()}
    used = 0
    for name in TMPFS:
        with contextlib.suppress(OSError), _opened(name, root) as place:
            if os.fstat(place).st_dev not in foreign:
                info = os.fstatvfs(place)
                used += info.f_files - info.f_ffree
    return used


@contextlib.contextmanager
def process_root(pid: int) -> Iterator[int | None]:
    """A descriptor of process ``pid``'s root directory (None once it is gone): it stays that
    process's root even if the pid is reused while it is open."""
    try:
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        yield None
        return
    try:
        yield root
    finally:
        os.close(root)


@contextlib.contextmanager
def _opened(path: str, root: int) -> Iterator[int]:
    """``path`` under ``root``, each of its directories opened without following a link."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
    current = os.dup(root)
    try:
        for part in path.split("/"):
            step = os.open(part, flags, dir_fd=current)
            os.close(current)
            current = step
        yield current
    finally:
        os.close(current)


def _host_devices() -> set[int]:
    devices = set()
    for path in ("/", *(f"/{name}" for name in TMPFS)):
        with contextlib.suppress(OSError):
            devices.add(os.stat(path).st_dev)
    return devices


def _same_file(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def sandbox_pid(leader: int, started: str | None = None) -> int | None:
    """A process inside the sandbox a trampoline ``leader`` runs: bubblewrap's second process,
    its grandchild (the first stays outside, to report the end); None once it is gone, or once
    ``leader`` is not the process that started at ``started`` (its pid reused after it was
    reaped: a pid names another process then, maybe another session's)."""
    if started is not None and start_time(leader) != started:
        return None
    pid: int | None = leader
    for _level in range(2):
        assert pid is not None
        pid = _first_child(pid)
        if pid is None:
            return None
    return pid


def _first_child(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


@dataclass
class Watched:
    """One session under the watch: where it writes, what was there when its program started
    (``baseline``), and the event its session waits on. Once over, ``exceeded`` says why and
    ``wake`` is set: the session's own thread, which owns the program, stops it."""

    name: str
    roots: tuple[Path, ...]
    quota: Quota
    wake: threading.Event
    sandbox_pid: Callable[[], int | None] = lambda: None
    baseline: Usage = field(default_factory=Usage)
    added: Usage = field(default_factory=Usage)  # at the last measurement
    exceeded: str | None = None

    def check(self) -> None:
        """Measure once; mark the session over if it is (or if it cannot be measured)."""
        if self.exceeded is not None:
            return
        limit = Usage(
            self.baseline.disk_bytes + self.quota.disk_bytes, self.baseline.files + self.quota.files
        )
        try:
            self.added = self.usage(stop_past=limit) - self.baseline
        except Unmeasurable as error:
            self.over(f"the watch of its disk use failed ({error.strerror})")
            return
        if (why := self.added.over(self.quota)) is not None:
            self.over(why)

    def headroom(self) -> Usage:
        """What it may still add, as of its last measurement."""
        return Usage(
            self.quota.disk_bytes - self.added.disk_bytes, self.quota.files - self.added.files
        )

    def usage(self, stop_past: Usage | None = None) -> Usage:
        """What its places hold now (up to ``stop_past``: see :func:`measure`)."""
        found = measure(self.roots, stop_past)
        return Usage(found.disk_bytes, found.files + self._sandbox_files())

    def _sandbox_files(self) -> int:
        """Files in its sandbox's tmpfs mounts, looked at through its sandbox's process: only
        while that pid is still the one found first (not one reused meanwhile)."""
        pid = self.sandbox_pid()
        if pid is None:
            return 0
        with process_root(pid) as root:
            if root is None or self.sandbox_pid() != pid:
                return 0
            return tmpfs_files(root)

    def over(self, why: str) -> None:
        self.exceeded = why
        log.warning("session %s is over its quota: %s", self.name, why)
        self.wake.set()

    def raise_if_over(self) -> None:
        """The interruption of a session found over its quota: an end the runtime chose,
        not the agent's failure, so admission decides what a successor may do."""
        if self.exceeded is None:
            return
        raise SessionInterrupted(
            f"the session's program was stopped: {self.exceeded}; its directory was removed. "
            "The attempt is interrupted and admission decides from the recorded effect facts",
            cause=AttemptCause.QUOTA_EXCEEDED.value,
        )


def watched_session(name: str, places: Sequence[Path], *, within: Path, quota: Quota) -> Watched:
    """Session ``name`` under ``quota``, its baseline measured now: of ``places`` (its
    directory, outputs, workspace), those inside ``within`` (the work directory: its own
    clone is, a shared workspace is no one session's), and never ``within`` itself: where
    they lead, not how they are spelled (``..``, a link), decides (the walk would count every
    session's files, or another tree's, as this one's)."""
    roots = tuple(path for path in places if _strictly_inside(path, within))
    watched = Watched(name, roots, quota, threading.Event())
    watched.baseline = watched.usage()
    return watched


def _strictly_inside(path: Path, directory: Path) -> bool:
    return directory.resolve() in path.resolve().parents


def require_free_space(settings: Settings) -> None:
    """:class:`NoSpaceForSessions` if the work directory's file system has less free space
    or files than the settings ask to keep (nothing is claimed then)."""
    found = free_space(settings.work_dir)
    if found is None:
        return
    free_bytes, free_files = found
    need_bytes = settings.work_dir_min_free_mib * MIB
    if free_bytes < need_bytes or free_files < settings.work_dir_min_free_files:
        raise NoSpaceForSessions(
            f"the work directory's file system ({settings.work_dir}) has "
            f"{free_bytes // MIB} MiB and {free_files} files free, under the "
            f"{settings.work_dir_min_free_mib} MiB and {settings.work_dir_min_free_files} files "
            "this worker keeps (SUREHAND_WORK_DIR_MIN_FREE_MIB, "
            "SUREHAND_WORK_DIR_MIN_FREE_FILES): no session was started and the TASK waits in "
            "inbox; free space there, or let another worker take it",
            free_mib=free_bytes // MIB,
            free_files=free_files,
        )


def free_space(work_dir: Path) -> tuple[int, int] | None:
    """(bytes, files) free to unprivileged users on ``work_dir``'s file system (the nearest
    existing directory's); None where that cannot be asked (the check is then skipped)."""
    for directory in [work_dir, *work_dir.absolute().parents]:
        with contextlib.suppress(OSError):
            info = os.statvfs(directory)
            return info.f_bavail * info.f_frsize, info.f_favail
    return None
