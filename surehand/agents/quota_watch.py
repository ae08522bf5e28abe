"""The thread that holds a worker's running sessions to their disk quotas.

A *round* measures every session (:meth:`surehand.agents.quotas.Watched.check`: a walk of its
places, so it costs in proportion to their files). Rounds come every
``SUREHAND_AGENT_QUOTA_CHECK_SECONDS``, or 20 times as long as the last one took, whichever is
longer: at most about 5% of a core, whatever the sessions hold.

Between rounds, a *tick* every :data:`TICK` seconds asks each file system the sessions write
on for its free space and files (one ``statvfs`` each: microseconds). When one has lost more
since the last round than the session with the least headroom may still add, a session may
be over: a round runs at once (no sooner than the last round's length after it, so a disk
that others keep filling holds the watch under half of a core while they do). A
flood is so found about a tick, plus one round's walk, after it passes its quota, however long
the interval between regular rounds has grown; ``bench/agents/quota.py`` measures how far it gets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

from surehand.agents.quotas import Usage, Watched
from surehand.config import Settings

log = logging.getLogger(__name__)

COST_FACTOR = 20  # a regular round waits at least this many times as long as the last took
TRIGGER_FACTOR = 1  # a triggered one, at least this many times
TICK = 0.02  # 50 statvfs calls a second per file system: microseconds each


class QuotaWatch:
    """Measures this process's running sessions (its thread starts with the first)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._sessions: dict[str, Watched] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.last_round = 0.0  # seconds the last round took
        self.rounds = 0

    def watch(self, watched: Watched) -> Watched:
        """Watch ``watched`` (its baseline measured already) until :meth:`forget`."""
        with self._lock:
            self._sessions[watched.name] = watched
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="surehand-quota-watch", daemon=True
                )
                self._thread.start()
        return watched

    def forget(self, watched: Watched) -> None:
        with self._lock:
            self._sessions.pop(watched.name, None)

    def sessions(self) -> list[Watched]:
        with self._lock:
            return list(self._sessions.values())

    def check_all(self) -> None:
        """One round over every watched session."""
        started = time.monotonic()
        for watched in self.sessions():
            try:
                watched.check()
            except Exception:  # the watch must outlive any one session's surprise
                log.exception("quota watch of session %s failed", watched.name)
                watched.over("the watch of its disk use failed")
        self.last_round = time.monotonic() - started
        self.rounds += 1

    def _run(self) -> None:
        while True:
            try:
                self.check_all()
                self.until_next_round(self.sessions())
            except Exception:  # never leave the sessions unwatched: log, and look again
                log.exception("the quota watch failed a round; it goes on")
                time.sleep(TICK)

    def until_next_round(self, sessions: list[Watched]) -> bool:
        """Sleep until the next regular round (False), or until a tick finds a file system
        that lost more than the tightest of ``sessions`` may still add (True)."""
        started = time.monotonic()
        due = started + max(self.every, COST_FACTOR * self.last_round)
        soonest = started + TRIGGER_FACTOR * self.last_round
        before = _free_by_device(sessions)
        least = _least_headroom(sessions)
        while (now := time.monotonic()) < due:
            time.sleep(min(TICK, due - now))
            if now < soonest or least is None:
                continue
            lost = _lost_since(before)
            if lost.disk_bytes >= least.disk_bytes or lost.files >= least.files:
                return True
        return False


def _free_by_device(sessions: list[Watched]) -> dict[int, tuple[str, Usage]]:
    """Each file system the sessions' places are on: a path on it and its free space."""
    found: dict[int, tuple[str, Usage]] = {}
    for watched in sessions:
        for root in watched.roots:
            with contextlib.suppress(OSError):
                device = os.stat(root).st_dev
                if device not in found:
                    found[device] = (str(root), _free(str(root)))
    return found


def _free(path: str) -> Usage:
    info = os.statvfs(path)
    return Usage(info.f_bfree * info.f_frsize, info.f_ffree)


def _lost_since(before: dict[int, tuple[str, Usage]]) -> Usage:
    """The most any one of the file systems lost since ``before``."""
    lost = Usage()
    for path, free in before.values():
        with contextlib.suppress(OSError):
            drop = free - _free(path)
            lost = Usage(max(lost.disk_bytes, drop.disk_bytes), max(lost.files, drop.files))
    return lost


def _least_headroom(sessions: list[Watched]) -> Usage | None:
    rooms = [watched.headroom() for watched in sessions if watched.exceeded is None]
    if not rooms:
        return None
    return Usage(min(r.disk_bytes for r in rooms), min(r.files for r in rooms))


_watches: dict[float, QuotaWatch] = {}
_watches_lock = threading.Lock()


def watch_for(settings: Settings) -> QuotaWatch:
    """This process's watch (one per check interval: one in practice)."""
    with _watches_lock:
        every = settings.agent_quota_check_seconds
        return _watches.setdefault(every, QuotaWatch(every))
