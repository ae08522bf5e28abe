"""Process checks for the command agent tests: is a process gone, which members of a process
group are alive. Linux ``/proc``; a zombie (dead, not yet reaped by whoever adopted it) counts
as gone, since PID 1 of a container may never reap it."""

from __future__ import annotations

import secrets
from pathlib import Path

from tests.procs import wait_until
from tests.skips import missing

PROC = Path("/proc")

# A command agent program (sh) for two attempts at one TASK. Attempt 1 starts a grandchild that
# ignores SIGTERM and SIGHUP (so only SIGKILL of the whole session ends it), marks
# $AGENT_TEST_DIR/attempt1.started and works for a long time; all its processes carry the
# unique sleep length $AGENT_MARK in their command lines, so the test finds them from the host
# whatever namespace they run in (:func:`marked`). A later attempt marks attempt<N>.started,
# waits for the test to create $AGENT_TEST_DIR/gate (the test looks for attempt 1's processes
# meanwhile), and reports "attempt <N>".
TWO_ATTEMPTS_AGENT = """\
if [ "$SUREHAND_ATTEMPT" = 1 ]; then
  sh -c "trap '' TERM HUP; sleep $AGENT_MARK" &
  touch "$AGENT_TEST_DIR/attempt1.started"
  sleep "$AGENT_MARK"
  exit 0
fi
touch "$AGENT_TEST_DIR/attempt$SUREHAND_ATTEMPT.started"
while [ ! -e "$AGENT_TEST_DIR/gate" ]; do sleep 0.05; done
echo "attempt $SUREHAND_ATTEMPT"
"""
TWO_ATTEMPTS_ENV = "AGENT_TEST_DIR,AGENT_MARK"  # SUREHAND_AGENT_ENV for it


def _state_and_group(stat: Path) -> tuple[str, int] | None:
    try:
        fields = stat.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[2])


def is_gone(pid: int) -> bool:
    """No such process, or only its zombie."""
    found = _state_and_group(PROC / str(pid) / "stat")
    return found is None or found[0] in {"Z", "X"}


def live_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` that are alive (not zombies)."""
    members = []
    for stat in PROC.glob("[0-9]*/stat"):
        found = _state_and_group(stat)
        if found is not None and found[1] == pgid and found[0] not in {"Z", "X"}:
            members.append(int(stat.parent.name))
    return members


def group_of(pid: int) -> int:
    found = _state_and_group(PROC / str(pid) / "stat")
    assert found is not None, f"process {pid} is gone"
    return found[1]


def require_proc() -> None:
    if not PROC.is_dir():
        missing("Linux /proc (to see process groups)")


def unique_seconds(base: int = 300) -> str:
    """A sleep length no other process on the host uses (``sleep 300.48213``): its command
    line marks the processes of one test, seen from the host whatever namespace they run in."""
    return f"{base}.{secrets.randbelow(10**6):06d}"


def marked(marker: str) -> list[int]:
    """The host pids of live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for cmdline in PROC.glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        pid = int(cmdline.parent.name)
        if any(marker.encode() in word for word in words) and not is_gone(pid):
            found.append(pid)
    return found


def wait_for_processes(mark: str) -> None:
    """Wait until the program's sleep and its grandchild run: the program marks itself started
    before it forks and execs them, so under load the host may not see them yet."""
    wait_until(
        lambda: len(marked(mark)) >= 2,
        timeout=30,
        what="the agent's sleep and its grandchild (the processes the kill must end)",
    )
