"""Which agent process group runs each TASK on this host, so that no successor runs beside it.

One small JSON file per TASK under ``<work_dir>/.agent-groups/`` (mode 0700, files 0600,
opened without following links) records the process group of the command agent that runs it:
host, boot id and the leader's start time (to tell a reused id, also across a reboot), its
session cgroup, and the attempt. Before a command agent starts a program for a TASK it reads
the record, under an exclusive ``flock`` of that file: a live group of an earlier attempt on
this host is SIGKILLed, and the new program starts only once every member is gone. A record
of a *later* attempt means this attempt is stale, and it starts nothing. Workers on one host
must share ``SUREHAND_WORK_DIR`` for this to hold between them; records of other hosts are
left alone.

A worker killed outright leaves its record behind; its group is killed by the trampoline, and
the record then names a group that is gone, which the next attempt overwrites.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from surehand.agents.cgroups import SessionCgroup
from surehand.agents.groups import GONE_SECONDS, AgentGroup, is_running, signal_group, wait_for
from surehand.errors import AgentError
from surehand.model import Attempt

log = logging.getLogger(__name__)

RECORDS_DIR = ".agent-groups"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class GroupRecord:
    """The process group running one attempt of a TASK on ``host`` since boot ``boot_id``,
    with the session cgroup that holds whatever of it left the group."""

    host: str
    pgid: int
    started: str | None
    attempt: int
    attempt_id: str
    boot_id: str | None = None
    cgroup: tuple[str, ...] = ()

    @classmethod
    def of(cls, group: AgentGroup, attempt: Attempt) -> GroupRecord:
        directories = tuple(str(d) for d in group.cgroup.directories) if group.cgroup else ()
        return cls(
            socket.gethostname(),
            group.pgid,
            group.started,
            attempt.number,
            attempt.attempt_id,
            boot_id(),
            directories,
        )

    def running_here(self) -> bool:
        """True if this record's group is on this host, since its last boot, still has a live
        member, and is ours to judge (a process of another user is not: False)."""
        if self.host != socket.gethostname() or self.boot_id != boot_id():
            return False  # another host, or a pid from before a reboot
        try:
            return is_running(self.pgid, self.started) or bool(self._cgroup().pids())
        except PermissionError:
            return False

    def kill(self) -> None:
        """SIGKILL the recorded group and its cgroup's members (not another user's)."""
        with contextlib.suppress(PermissionError):
            signal_group(self.pgid, signal.SIGKILL)
        self._cgroup().kill()

    def _cgroup(self) -> SessionCgroup:
        return SessionCgroup(tuple(Path(directory) for directory in self.cgroup))


def boot_id() -> str | None:
    """This boot's id (Linux), which tells a pid recorded before a reboot."""
    try:
        return BOOT_ID.read_text(encoding="ascii").strip()
    except OSError:
        return None


class Slot:
    """One TASK's record file, locked for as long as the slot is open."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self) -> GroupRecord | None:
        data = os.pread(self.fd, 64 * 1024, 0)
        try:
            fields = json.loads(data) if data.strip() else None
            if fields is None:
                return None
            fields["cgroup"] = tuple(fields.get("cgroup", ()))
            return GroupRecord(**fields)
        except (ValueError, TypeError, AttributeError):
            return None  # a torn or foreign file: nothing usable recorded

    def write(self, record: GroupRecord | None) -> None:
        os.ftruncate(self.fd, 0)
        if record is not None:
            os.pwrite(self.fd, json.dumps(asdict(record)).encode(), 0)

    def clear_for(self, attempt: Attempt) -> None:
        """Kill a live group of an earlier attempt and wait until it is gone; refuse if a later
        attempt's group runs here (``AgentError``): then this attempt is the stale one."""
        record = self.read()
        if record is None or record.attempt_id == attempt.attempt_id or not record.running_here():
            return
        if record.attempt > attempt.number:
            raise AgentError(
                f"attempt {record.attempt} of this TASK runs its command on this host "
                f"(process group {record.pgid}); attempt {attempt.number} starts nothing"
            )
        log.warning(
            "killing process group %d of attempt %d of %s before attempt %d starts",
            *(record.pgid, record.attempt, attempt.task_id, attempt.number),
        )
        record.kill()
        if not wait_for(lambda: not record.running_here(), GONE_SECONDS):
            raise AgentError(
                f"process group {record.pgid} of attempt {record.attempt} of this TASK is still "
                f"alive {GONE_SECONDS:g}s after SIGKILL; attempt {attempt.number} starts nothing"
            )


class GroupRecords:
    """The per-TASK group records of one work directory."""

    def __init__(self, work_dir: Path) -> None:
        self.directory = work_dir / RECORDS_DIR

    @contextmanager
    def slot(self, task_id: str) -> Iterator[Slot]:
        """The TASK's record, exclusively locked (other threads and processes wait)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", task_id) + ".json"
        fd = _open_record(self.directory / name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield Slot(fd)
        finally:
            os.close(fd)  # releases the lock

    def release(self, task_id: str, attempt_id: str) -> bool:
        """Clear the TASK's record if it is still this attempt's; False if another took it."""
        with self.slot(task_id) as slot:
            record = slot.read()
            if record is not None and record.attempt_id != attempt_id:
                return False
            slot.write(None)
            return True


def _open_record(path: Path) -> int:
    """The record file, never through a link: one planted in its place (where an agent could
    reach this directory) is removed, not followed, and a fresh file is made."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
    log.warning("%s was a symbolic link; removed it", path)
    path.unlink()
    return os.open(path, flags | os.O_EXCL, 0o600)
