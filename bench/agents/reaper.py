"""Benchmark how long a command agent's process group outlives its SIGKILLed worker.

    python bench/agents/reaper.py [--rounds N]

Each round starts a stand-in "worker" (a Python process) that starts the trampoline
(``surehand/agents/reaper.py``) the way the command agent does, running a program that leaves
a TERM-ignoring child behind; once the group is up, the worker is SIGKILLed and the time until
no live member of the group is left is measured (``/proc`` polled every millisecond). The
test suite (``tests/agents/test_agent_reaper.py``) asserts only that the group goes; how fast is
this measurement. Printed (median, p90, max) and saved to ``bench/results/reaper-<UTC>.json``.
Linux only. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import machine
from bench.common.results import save
from surehand.agents.groups import REAPER

PROC = Path("/proc")
WORKER = f"""
import os, subprocess, sys, time
subprocess.Popen(
    [sys.executable, "-I", "-S", {str(REAPER)!r}, "--parent", str(os.getpid()), "--",
     *sys.argv[1:]],
    start_new_session=True,
)
time.sleep(300)
"""


def state_and_group(stat: Path) -> tuple[str, int] | None:
    try:
        fields = stat.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[2])


def live_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` that are alive (not zombies)."""
    members = []
    for stat in PROC.glob("[0-9]*/stat"):
        found = state_and_group(stat)
        if found is not None and found[1] == pgid and found[0] not in {"Z", "X"}:
            members.append(int(stat.parent.name))
    return members


def one_round(directory: Path) -> float:
    """Seconds from the worker's SIGKILL until its agent's group has no live member."""
    pids = directory / "pids"
    pids.unlink(missing_ok=True)
    program = (
        "sh -c 'trap \"\" TERM HUP INT; sleep 300' & "
        f'echo "$$ $!" > {pids}.tmp && mv {pids}.tmp {pids}; sleep 300'
    )
    worker = subprocess.Popen([sys.executable, "-c", WORKER, "sh", "-c", program])
    while not pids.exists():
        time.sleep(0.005)
    found = state_and_group(PROC / pids.read_text().split()[0] / "stat")
    assert found is not None, "the program is gone"
    group = found[1]  # the trampoline's group
    while len(live_members(group)) < 3:
        time.sleep(0.005)
    killed = time.monotonic()
    worker.kill()
    worker.wait()
    while live_members(group):
        time.sleep(0.001)
    return time.monotonic() - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as directory:
        seconds = sorted(one_round(Path(directory)) for _ in range(rounds))
    summary = {
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "p90_ms": round(seconds[int(0.9 * (len(seconds) - 1))] * 1000, 1),
        "max_ms": round(seconds[-1] * 1000, 1),
    }
    print(f"worker SIGKILL -> agent group gone, {rounds} rounds: {summary}")
    save("reaper", machine(rounds=rounds, **summary))


if __name__ == "__main__":
    main()
