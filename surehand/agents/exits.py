"""Waking a session when its program ends, without polling.

A command session's thread waits for its program's end, its cancellation or its timeout. Polled
(``Popen.wait(timeout)`` wakes up every 50 ms), 1,000 waiting sessions woke their worker 20,000
times a second: the threads fought for the GIL, lease renewals waited seconds for it while they
held the Redis pool's connections, and the sessions lost their leases (issue 22's scale bench).

Here one daemon thread per process waits on a Linux *pidfd* for each program (``epoll``: one
wait for all of them) and calls the program's callback when it ends; the session's thread
sleeps on an event until something it cares about happens. Where pidfds are missing (not
Linux, or a kernel before 5.3) :func:`watch` says so, and the caller polls as before.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ExitWatch:
    """Calls a callback when a child process ends (becomes a zombie: it is not reaped here)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # A forked child (a prefork pool's) watches its own programs with a thread of its own.
        self._lock = threading.Lock()
        self._epoll: select.epoll | None = None
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, on_exit: Callable[[], object]) -> bool:
        """Call ``on_exit`` (from the watch thread) once ``pid`` has ended; False if this
        platform has no pidfds (then nothing will be called: poll instead). ``pid`` must be a
        child not reaped yet, so that its number cannot belong to another process."""
        pidfd = _pidfd(pid)
        if pidfd is None:
            return False
        with self._lock:
            epoll = self._started()
            self._callbacks[pidfd] = on_exit
            epoll.register(pidfd, select.EPOLLIN)  # safe while the thread waits in poll()
        return True

    def _started(self) -> select.epoll:
        if self._epoll is None:
            self._epoll = select.epoll()
            self._thread = threading.Thread(
                target=self._run, args=(self._epoll,), name="surehand-exit-watch", daemon=True
            )
            self._thread.start()
        return self._epoll

    def _run(self, epoll: select.epoll) -> None:
        while True:  # never ends on an error: every waiting session depends on this thread
            try:
                for pidfd, _ in epoll.poll():
                    self._ended(epoll, pidfd)
            except Exception:
                log.exception("the exit watch failed; watching on")

    def _ended(self, epoll: select.epoll, pidfd: int) -> None:
        with self._lock:
            epoll.unregister(pidfd)
            on_exit = self._callbacks.pop(pidfd)
        os.close(pidfd)
        try:
            on_exit()
        except Exception:
            log.exception("a program's exit callback failed")


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:  # ENOSYS before Linux 5.3; ESRCH cannot happen for an unreaped child
        return None
    os.set_inheritable(fd, False)
    return fd


_watch = ExitWatch()


def watch(pid: int, on_exit: Callable[[], object]) -> bool:
    """This process's :meth:`ExitWatch.watch`."""
    return _watch.watch(pid, on_exit)
