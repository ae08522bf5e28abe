"""Command agents' process groups, seen from the worker: start, stop, find alive, stop at exit.

A group is led by the trampoline (``surehand/agents/reaper.py``): the leader's pid is the group's
id, and the trampoline SIGKILLs the group when this worker process dies. This module is the
worker's side of it: starting a group, stopping all of it (leader, program, and whatever the
program started), telling whether a recorded group still has live members, and a process-wide
registry of this process's live groups that shutdown stops (:func:`stop_all`, :func:`kill_all`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from surehand.agents import exits
from surehand.agents.cgroups import SessionCgroup
from surehand.agents.reaper import kill_tree

REAPER = Path(__file__).with_name("reaper.py")
STOP_GRACE_SECONDS = 5.0  # from SIGTERM to SIGKILL for a group being stopped
GONE_SECONDS = 10.0  # how long SIGKILLed processes may take to vanish (e.g. exiting from I/O)
_POLL = 0.05
_FIRST_POLL = 0.001
_PROC = Path("/proc")


class AgentGroup:
    """One command agent's process group, led by the trampoline this process started, and its
    session cgroup when it has one (which also holds whatever left the group)."""

    def __init__(
        self, process: subprocess.Popen[bytes], cgroup: SessionCgroup | None = None
    ) -> None:
        self.process = process
        self.pgid = process.pid  # a session leader's pid is its group's id
        self.started = start_time(process.pid)
        self.cgroup = cgroup
        self.interrupted = False  # set when this process's shutdown stopped the group
        self._wakers: set[threading.Event] = set()
        self._ended = False
        self._wakers_lock = threading.Lock()
        # Before anything can reap the leader (a pid is only safe to watch until then).
        self.watched = exits.watch(process.pid, self._on_exit)

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdout: IO[bytes],
        stderr: IO[bytes],
        trampoline: Sequence[str] = (),
        cgroup: SessionCgroup | None = None,
    ) -> AgentGroup:
        """Run ``argv`` under the trampoline as the leader of a new session and process group;
        ``trampoline``: its options (limits, user, subreaper), and it joins ``cgroup`` first.

        ``env`` is the whole environment of the trampoline and so of everything it starts."""
        joins = [
            arg
            for procs in (cgroup.procs_files if cgroup else ())
            for arg in ("--cgroup", str(procs))
        ]
        command = [sys.executable, "-I", "-S", str(REAPER), "--parent", str(os.getpid()), *joins]
        process = subprocess.Popen(
            [*command, *trampoline, "--", *argv],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        group = cls(process, cgroup)
        _register(group)
        return group

    def poll(self) -> int | None:
        """The program's exit code (negative: the signal that killed it), None while it runs."""
        return self.process.poll()

    @contextlib.contextmanager
    def waking(self, event: threading.Event) -> Iterator[bool]:
        """While inside, the leader's end sets ``event`` (at once if it has ended); yields
        whether it will (False without pidfds: then poll)."""
        with self._wakers_lock:
            self._wakers.add(event)
            if self._ended:
                event.set()
        try:
            yield self.watched
        finally:
            with self._wakers_lock:
                self._wakers.discard(event)

    def _on_exit(self) -> None:
        with self._wakers_lock:
            self._ended = True
            for event in self._wakers:
                event.set()

    def running(self) -> bool:
        """True while the leader runs, or any member of the group or the cgroup is alive."""
        return (
            self.process.poll() is None
            or group_alive(self.pgid)
            or bool(self.cgroup and self.cgroup.pids())
        )

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM the whole group, SIGKILL it after ``grace`` seconds (default
        :data:`STOP_GRACE_SECONDS`), and wait until it is gone.

        The group, not just the leader: a child that ignores SIGTERM would otherwise live on,
        still able to make side effects for a session that has ended. And what left the group
        dies too: the trampoline's descendants (a subreaper adopts them) and the cgroup's
        members. Safe to call again.
        """
        if self.running():
            self.terminate()
            if not wait_for(lambda: not self.running(), _grace(grace)):
                self.kill()
        self.process.wait()
        if self.cgroup is not None:
            self.cgroup.kill()  # a member that outlived the group's end
        wait_for(lambda: not self.running(), GONE_SECONDS)
        if self.cgroup is not None:
            self.cgroup.remove()
        _unregister(self)

    def terminate(self) -> None:
        """SIGTERM: to the trampoline, which passes it to every process below it (those that
        left the group too, and those in a sandbox), or to the group once it has ended."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pgid, signal.SIGTERM)
        else:
            signal_group(self.pgid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL everything of the session now: the trampoline's descendants first (while it
        lives, so that orphans are still its own), then the group, then the cgroup."""
        if self.process.poll() is None:
            kill_tree(self.pgid)
        signal_group(self.pgid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()


def _grace(grace: float | None) -> float:
    return STOP_GRACE_SECONDS if grace is None else grace  # read late: tests shorten it


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False if the group has no member left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """True if a process of group ``pgid`` is alive (zombies, dead but not reaped, are not)."""
    if not signal_group(pgid, 0):
        return False
    if not _PROC.is_dir():
        return True  # no /proc: zombies count as alive here
    return any(_live_member(stat, pgid) for stat in _PROC.glob("[0-9]*/stat"))


def _live_member(stat: Path, pgid: int) -> bool:
    try:
        fields = stat.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False  # gone while we looked
    return fields[2] == str(pgid) and fields[0] not in {"Z", "X"}


def start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks after boot; Linux), to tell a reused pid."""
    try:
        return (_PROC / str(pid) / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def is_running(pgid: int, started: str | None) -> bool:
    """True if the group recorded as ``pgid``, led by a process started at ``started``, runs.

    A group's id cannot be reused while it has members, so live members with the leader gone
    are that group's; a live leader that started at another time is a new group on a reused id.
    """
    if not group_alive(pgid):
        return False
    now = start_time(pgid)
    return started is None or now is None or now == started


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` for up to ``timeout`` seconds; whether it came true. The first looks
    come after a millisecond, doubling up to ``_POLL``: what is already dying (a sandbox's
    portal, killed with its namespace, still listed in the session's cgroup) is gone by then,
    and a stop waited a whole ``_POLL`` for it."""
    deadline = time.monotonic() + timeout
    pause = _FIRST_POLL
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, _POLL)
    return True


# -- this process's live groups, stopped when it shuts down ----------------------------------

_live: set[AgentGroup] = set()
_lock = threading.Lock()
_hooked = False


def _register(group: AgentGroup) -> None:
    global _hooked
    with _lock:
        _live.add(group)
        if not _hooked:
            atexit.register(stop_all)
            _hooked = True


def _unregister(group: AgentGroup) -> None:
    with _lock:
        _live.discard(group)


def live_groups() -> list[AgentGroup]:
    """The groups this process started that have not been stopped and reaped yet."""
    with _lock:
        return list(_live)


def stop_all(grace: float | None = None) -> None:
    """Shutdown: SIGTERM every live group, SIGKILL what is left after ``grace`` seconds.

    Each group is marked ``interrupted`` first, so its session ends as interrupted (taken over
    by the reconciler), never as an agent failure. Its session's thread reaps the leader.
    """
    groups = live_groups()
    for group in groups:
        group.interrupted = True
        group.terminate()
    wait_for(lambda: not any(group.running() for group in groups), _grace(grace))
    kill_all(groups)


def kill_all(groups: Sequence[AgentGroup] | None = None) -> None:
    """SIGKILL every live group now (for a process about to leave with ``os._exit``)."""
    for group in live_groups() if groups is None else groups:
        group.interrupted = True
        if group.running():  # a reaped, empty group's id may belong to someone else by now
            with contextlib.suppress(PermissionError):
                group.kill()
