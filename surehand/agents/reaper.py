"""The trampoline every command agent runs under: it ties the agent's process group to the worker.

    python -I -S reaper.py --parent PID [--cgroup FILE]... [--rlimit NAME=N]... [--user UID:GID]
                        [--subreaper | --sandboxed] -- PROGRAM [ARG...]

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

Before PROGRAM starts it joins the session's cgroups (``--cgroup``: each a ``cgroup.procs``
file; everything it starts inherits them), and in PROGRAM's process only it sets the resource
limits (``--rlimit cpu=3600``: ``RLIMIT_CPU``, soft and hard) and drops to another user
(``--user``). With ``--subreaper`` it becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``): a
descendant that leaves the group (``setsid``, a double fork) is re-parented to it, not to init,
so it is still found and SIGKILLed as a descendant when PROGRAM ends or the worker dies.

It exits as PROGRAM did (the same code, or killed by the same signal), so the worker reads the
program's own end. SIGTERM and SIGINT sent to it are for PROGRAM: it passes them to every
process below it (``--sandboxed``: PROGRAM is bubblewrap's, whose own two processes are left to
report its end) and outlives them; the worker's SIGKILL after the stop grace ends it.

Standard library only, and run with ``-I -S``: it must start in milliseconds, not import
surehand (nor, through ``site``, the installed packages' import hooks).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import signal
import sys
import time
from collections.abc import Sequence

# How often the trampoline looks whether its worker is still its parent: the watchdog where the
# parent-death signal could not be armed, and a slower safety net where it was (1,000 sessions'
# trampolines waking 10 times a second cost the host ~10,000 Python wakeups a second).
WATCH_SECONDS = 0.1
WATCH_ARMED_SECONDS = 1.0
# The parent-death signal: a real-time one, which no program sends its group by habit (as some
# do SIGHUP to reload), so that receiving it always means the worker's side is gone.
DEATH_SIGNAL: int = signal.SIGRTMIN + 2 if hasattr(signal, "SIGRTMIN") else signal.SIGHUP
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
EXIT_CANNOT_RUN = 127  # what a shell exits with for a program it cannot find
KILL_TREE_SECONDS = 10.0
RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "as": resource.RLIMIT_AS,
    "core": resource.RLIMIT_CORE,
}


class Options:
    """The command line's options (a plain class: ``dataclasses`` costs milliseconds to import,
    and this process starts for every session)."""

    def __init__(self) -> None:
        self.parent = 0
        self.program: Sequence[str] = ()
        self.cgroups: list[str] = []
        self.rlimits: list[tuple[int, int]] = []
        self.user: tuple[int, int] | None = None
        self.subreaper = False
        self.sandboxed = False
        self.program_pid = 0
        self.executable = ""  # PROGRAM's path, found on PATH before the fork


_options = Options()
_killing = False  # set by the first _kill_group: the group is being killed


def main(argv: Sequence[str]) -> int:
    """Run PROGRAM until it ends, or kill its group (and descendants) if PID dies."""
    global _options
    _options = _parse(argv)
    _join(_options.cgroups)  # first: whatever starts from here on is a member
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # for _supervise's wait
    armed = _tie_to(_options.parent)
    if _options.subreaper:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        pid = _options.program_pid = _spawn(_options)
    except OSError as error:
        print(f"surehand: cannot run {_options.program[0]!r}: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    status = _supervise(pid, _options.parent, WATCH_ARMED_SECONDS if armed else WATCH_SECONDS)
    if _options.subreaper:
        kill_tree(os.getpid())  # what PROGRAM left behind, wherever it moved itself
    return _exit_as(status)


def _parse(argv: Sequence[str]) -> Options:
    options = Options()
    args = list(argv)
    try:
        while args[0] != "--":
            flag = args.pop(0)
            if flag in ("--subreaper", "--sandboxed"):
                setattr(options, flag[2:], True)
                continue
            value = args.pop(0)
            if flag == "--parent":
                options.parent = int(value)
            elif flag == "--cgroup":
                options.cgroups.append(value)
            elif flag == "--rlimit":
                name, _, number = value.partition("=")
                options.rlimits.append((RLIMITS[name], int(number)))
            elif flag == "--user":
                uid, _, gid = value.partition(":")
                options.user = (int(uid), int(gid or uid))
            else:
                raise ValueError(flag)
        options.program = args[1:]
    except (IndexError, KeyError, ValueError):
        options.program = ()
    if not options.parent or not options.program:
        raise SystemExit(
            "usage: reaper.py --parent PID [--cgroup FILE]... [--rlimit NAME=N]... "
            "[--user UID:GID] [--subreaper | --sandboxed] -- PROGRAM [ARG...]"
        )
    return options


def _join(cgroups: Sequence[str]) -> None:
    for procs in cgroups:
        with open(procs, "w") as file:  # an error here stops the session: no unbounded run
            file.write(str(os.getpid()))


def _tie_to(parent: int) -> bool:
    """Die with ``parent`` (killing the group); whether its death will signal this process."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _forward)  # a handler, not SIG_IGN: PROGRAM must not inherit it
    signal.signal(DEATH_SIGNAL, _kill_group)
    armed = _set_parent_death_signal(DEATH_SIGNAL)
    if os.getppid() != parent:  # the worker died before the death signal was armed
        _kill_group()
    return armed


def _set_parent_death_signal(sig: int) -> bool:
    return _prctl(_PR_SET_PDEATHSIG, sig)


def _prctl(option: int, value: int) -> bool:
    """Whether the option was set."""
    if not sys.platform.startswith("linux"):
        return False  # the watchdog alone
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False  # no prctl here: the watchdog alone


def _spawn(options: Options) -> int:
    """Fork PROGRAM with its limits and user; OSError if it cannot be executed."""
    # Found on PATH here, before the fork: the search imports modules the agent's user may be
    # unable to read (an interpreter under a home of the worker's).
    options.executable = _executable(options.program[0])
    read_end, write_end = os.pipe2(os.O_CLOEXEC)  # carries an exec error back, else closes
    pid = os.fork()
    if pid == 0:  # this process has one thread: forking it is safe
        os.close(read_end)
        try:
            _become_program(options)
        except OSError as error:
            os.write(write_end, (error.strerror or str(error)).encode())
        os._exit(EXIT_CANNOT_RUN)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as errors:
        failure = errors.read()
    if failure:
        os.waitpid(pid, 0)
        raise OSError(failure.decode(errors="replace"))
    return pid


def _become_program(options: Options) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the mask survives exec: PROGRAM's is empty
    for limit, value in options.rlimits:
        resource.setrlimit(limit, (value, value))
    if options.user is not None:
        uid, gid = options.user
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    os.execve(options.executable, list(options.program), dict(os.environ))


def _executable(name: str) -> str:
    """``name``'s path, as ``execvp`` would find it on PATH."""
    if os.sep in name:
        return name
    for directory in os.get_exec_path():
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise OSError(os.strerror(errno.ENOENT))


def _forward(signum: int, _frame: object) -> None:
    """SIGTERM or SIGINT for this session: passed to PROGRAM and every process below it (in a
    sandbox, below bubblewrap's own two, which must live on to report PROGRAM's end)."""
    for pid in descendants(os.getpid(), below=2 if _options.sandboxed else 0):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _kill_group(_signum: object = None, _frame: object = None) -> None:
    """SIGKILL PROGRAM's descendants (with ``--subreaper``) and this process group: PROGRAM,
    what it started, and this process last of all.

    Once only: a multithreaded worker's death signals this process once per thread that ends
    (the parent-death signal follows the re-parenting to a sibling thread), and a second call
    run inside the first would kill this process before the first has killed everything."""
    global _killing
    if _killing:
        return
    _killing = True
    if _options.subreaper:
        kill_tree(os.getpid())
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _supervise(pid: int, parent: int, watch_seconds: float) -> int:
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        _reap_adopted()
        if os.getppid() != parent:
            _kill_group()
        # Woken at once by a child's end (SIGCHLD is blocked, so it waits here), else after
        # watch_seconds to look at the parent again.
        signal.sigtimedwait([signal.SIGCHLD], watch_seconds)


def _reap_adopted() -> None:
    """Reap orphans a subreaper adopted (never PROGRAM, which is waited for by its pid).

    By ``waitid`` on this process's own children, not by a walk of ``/proc``: this runs every
    ``WATCH_SECONDS`` in every command session's trampoline, and a walk reads every process on
    the host each time (1,000 sessions: 3,000+ processes, read 10,000 times a second)."""
    if not _options.subreaper:
        return
    while True:
        try:  # WNOWAIT: look at which child ended, and leave PROGRAM to its own wait
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None or ended.si_pid in (0, _options.program_pid):
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(ended.si_pid, os.WNOHANG)


def descendants(root: int, *, depth: int | None = None, below: int = 0) -> list[int]:
    """The processes below ``root`` (children first), by the parent links in ``/proc``, down
    to ``depth`` levels and from level ``below + 1`` on; zombies only at ``depth`` 1 (its
    children, which it may reap).

    The walk goes *through* zombies: a multithreaded process whose main thread has ended (one
    being SIGKILLed, thread by thread) shows ``Z`` while its other threads and its children
    still live, and those children are still its own until its last thread is gone."""
    children: dict[int, list[tuple[int, bool]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (entry := _stat(int(name))) is not None:
            state, ppid = entry
            children.setdefault(ppid, []).append((int(name), state in "ZX"))
    found: list[int] = []
    level, frontier = 0, [root]
    while frontier and (depth is None or level < depth):
        below_frontier = [child for pid in frontier for child in children.get(pid, ())]
        frontier = [pid for pid, _ in below_frontier]
        level += 1
        if level > below:
            found += [pid for pid, dead in below_frontier if depth == 1 or not dead]
    return found


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def kill_tree(root: int, timeout: float = KILL_TREE_SECONDS) -> bool:
    """SIGKILL every descendant of ``root`` until none is left (a child forked meanwhile is
    re-parented to ``root`` when ``root`` is a subreaper, and found in the next round); whether
    it got them all within ``timeout`` seconds."""
    if root == os.getpid() and not _has_children():
        return True  # nothing below: no walk of /proc (1,000 sessions ending at once did 3M reads)
    deadline = time.monotonic() + timeout
    while found := descendants(root):
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if root == os.getpid():
            _reap_adopted()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _has_children() -> bool:
    """Whether this process has a child, alive or a zombie: the only way anything can be below
    it (an orphan below a subreaper is re-parented to it, so it is a child too)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


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
