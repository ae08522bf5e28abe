"""The trampoline every command agent runs under: it ties the agent's process group to the worker.

    python -I reaper.py --parent PID -- PROGRAM [ARG...]

The command agent starts this as the leader of a new session, so its pid is the process group's
id, and PROGRAM (its child) and everything PROGRAM starts share that group. When the worker
process PID goes away, this process SIGKILLs the whole group, itself included:

- on Linux, ``PR_SET_PDEATHSIG`` delivers a signal at once when the *thread* that started this
  process exits. That thread is the session's own, which waits for the group until it is gone,
  so it only exits first when the worker process dies (SIGKILL, ``os._exit``) — the case this
  is for. (Were that thread ever to end while the process lives on, its session would be over
  too, with nobody left to wait for the group: killing it is right then as well.)
- everywhere, a watchdog checks every ``WATCH_SECONDS`` that the parent is still PID (an orphan
  is re-parented to init or a subreaper). It also covers a parent that died before
  ``PR_SET_PDEATHSIG`` was set, and systems without it.

It exits as PROGRAM did (the same code, or killed by the same signal), so the worker reads the
program's own end. SIGTERM and SIGINT sent to the group are for PROGRAM: this process outlives
them to report PROGRAM's end; the worker's SIGKILL after the stop grace ends it.

Standard library only, and run with ``-I``: it must start in milliseconds, not import surehand.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Sequence

WATCH_SECONDS = 0.1
# The parent-death signal: a real-time one, which no program sends its group by habit (as some
# do SIGHUP to reload), so that receiving it always means the worker's side is gone.
DEATH_SIGNAL: int = signal.SIGRTMIN + 2 if hasattr(signal, "SIGRTMIN") else signal.SIGHUP
_PR_SET_PDEATHSIG = 1
EXIT_CANNOT_RUN = 127  # what a shell exits with for a program it cannot find


def main(argv: Sequence[str]) -> int:
    """Run PROGRAM in this process group until it ends, or kill the group if PID dies."""
    parent, program = _parse(argv)
    _tie_to(parent)
    try:
        pid = os.posix_spawnp(program[0], list(program), dict(os.environ))
    except OSError as error:
        print(f"surehand: cannot run {program[0]!r}: {error.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    return _exit_as(_supervise(pid, parent))


def _parse(argv: Sequence[str]) -> tuple[int, Sequence[str]]:
    if len(argv) < 4 or argv[0] != "--parent" or argv[2] != "--":
        raise SystemExit("usage: reaper.py --parent PID -- PROGRAM [ARG...]")
    return int(argv[1]), argv[3:]


def _tie_to(parent: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _ignore)  # a handler, not SIG_IGN: PROGRAM must not inherit it
    signal.signal(DEATH_SIGNAL, _kill_group)
    _set_parent_death_signal(DEATH_SIGNAL)
    if os.getppid() != parent:  # the worker died before the death signal was armed
        _kill_group()


def _set_parent_death_signal(sig: int) -> None:
    if not sys.platform.startswith("linux"):
        return  # the watchdog alone
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl here: the watchdog alone


def _ignore(_signum: int, _frame: object) -> None:
    return None


def _kill_group(_signum: object = None, _frame: object = None) -> None:
    """SIGKILL this process group: PROGRAM, what it started, and this process last of all."""
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _supervise(pid: int, parent: int) -> int:
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if os.getppid() != parent:
            _kill_group()
        time.sleep(WATCH_SECONDS)


def _exit_as(status: int) -> int:
    """The exit code for PROGRAM's wait status; for a signal, die of the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's action cannot be set
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig  # only if that signal does not end a process by default
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
