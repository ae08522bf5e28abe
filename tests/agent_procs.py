"""Process checks for the command agent tests: is a process gone, which members of a process
group are alive. Linux ``/proc``; a zombie (dead, not yet reaped by whoever adopted it) counts
as gone, since PID 1 of a container may never reap it."""

from __future__ import annotations

from pathlib import Path

import pytest

PROC = Path("/proc")

# A command agent program (sh) for two attempts at one TASK. Attempt 1 starts a grandchild that
# ignores SIGTERM and SIGHUP (so only SIGKILL of the group ends it), writes "leader grandchild"
# pids to $AGENT_TEST_DIR/attempt1.pids and works for 5 minutes. A later attempt reports which
# of those processes are alive when it starts: "attempt 2; alive:" and their pids.
TWO_ATTEMPTS_AGENT = """\
pids="$AGENT_TEST_DIR/attempt1.pids"
if [ "$SUREHAND_ATTEMPT" = 1 ]; then
  sh -c 'trap "" TERM HUP; sleep 300' &
  echo "$$ $!" > "$pids.tmp" && mv "$pids.tmp" "$pids"
  sleep 300
  exit 0
fi
alive=""
for p in $(cat "$pids"); do
  if [ -r /proc/$p/stat ] && ! grep -q ') [ZX] ' /proc/$p/stat; then alive="$alive $p"; fi
done
echo "attempt $SUREHAND_ATTEMPT; alive:$alive"
"""


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
        pytest.skip("needs Linux /proc to see process groups")
