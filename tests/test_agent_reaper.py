"""The command agent's trampoline (``surehand/agents/reaper.py``) on its own: it runs a program
in its process group, exits as the program did, and SIGKILLs the whole group when the process
that started it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from surehand.agents.groups import REAPER
from tests.agent_procs import group_of, live_members, require_proc
from tests.procs import wait_until


def run_reaper(*program: str, parent: int | None = None) -> subprocess.CompletedProcess[str]:
    parent = os.getpid() if parent is None else parent
    return subprocess.run(
        [sys.executable, "-I", "-S", str(REAPER), "--parent", str(parent), "--", *program],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        check=False,
    )


def test_it_exits_with_the_programs_code() -> None:
    assert run_reaper("sh", "-c", "echo out; exit 3").returncode == 3


def test_it_dies_of_the_signal_that_killed_the_program() -> None:
    assert run_reaper("sh", "-c", "kill -TERM $$").returncode == -signal.SIGTERM


def test_a_program_it_cannot_run_exits_127_and_says_why() -> None:
    done = run_reaper("no-such-program-here")
    assert done.returncode == 127
    assert done.stderr == "surehand: cannot run 'no-such-program-here': No such file or directory\n"


def test_a_parent_that_is_not_the_one_named_kills_the_group_before_the_program_runs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    done = run_reaper("sh", "-c", f"touch {marker}", parent=1)
    assert done.returncode == -signal.SIGKILL
    assert not marker.exists()


# The "worker": starts the trampoline like the command agent does, says the pids, then waits.
WORKER = f"""
import os, subprocess, sys, time
subprocess.Popen(
    [sys.executable, "-I", "-S", {str(REAPER)!r}, "--parent", str(os.getpid()), "--",
     *sys.argv[1:]],
    start_new_session=True,
)
time.sleep(300)
"""


def test_the_whole_group_dies_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    require_proc()
    pids = tmp_path / "pids"
    program = (
        "sh -c 'trap \"\" TERM HUP INT; sleep 300' & "
        f'echo "$$ $!" > {pids}.tmp && mv {pids}.tmp {pids}; sleep 300'
    )
    worker = subprocess.Popen([sys.executable, "-c", WORKER, "sh", "-c", program])
    try:
        wait_until(pids.exists, timeout=30, what="the program to start")
        group = group_of(int(pids.read_text().split()[0]))
        assert len(live_members(group)) >= 3
    finally:
        worker.kill()
        worker.wait()

    # Bounded, not timed: how fast the group goes is a measurement, not a pass condition.
    wait_until(lambda: not live_members(group), timeout=30, what=f"group {group} to be gone")
