"""The command agent's trampoline (``surehand/agents/reaper.py``) on its own: it runs a program
in its process group, exits as the program did, and SIGKILLs the whole group when the process
that started it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from surehand.agents import reaper
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


# A program whose command outlives its main thread: a thread starts the command in a session of
# its own (as Claude Code's Bash tool does), then the main thread ends. The process shows ``Z``
# in /proc while its other thread and its child live on, as an agent CLI does while SIGKILL
# takes its threads down one by one.
ZOMBIE_LEADER = """
import ctypes, os, subprocess, sys, threading, time
def start() -> None:
    command = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(sys.argv[1] + ".tmp", "w") as out:
        out.write(f"{os.getpid()} {command.pid}")
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(300)
threading.Thread(target=start).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)
"""

SUBREAPER_WORKER = WORKER.replace('"--",', '"--subreaper", "--",')


def test_a_command_in_its_own_session_under_a_program_whose_main_thread_ended_dies_too(
    tmp_path: Path,
) -> None:
    require_proc()
    pids = tmp_path / "pids"
    worker = subprocess.Popen(
        [sys.executable, "-c", SUBREAPER_WORKER, sys.executable, "-c", ZOMBIE_LEADER, str(pids)]
    )
    try:
        wait_until(pids.exists, timeout=30, what="the command to start")
        program, command = (int(pid) for pid in pids.read_text().split())
        wait_until(lambda: state_of(program) == "Z", timeout=30, what="the main thread to end")
        assert state_of(command) == "S"
    finally:
        worker.kill()
        worker.wait()

    wait_until(lambda: state_of(command) is None, timeout=30, what="the command to die")


def state_of(pid: int) -> str | None:
    """The /proc state letter of ``pid``; None once it is gone (or reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def test_a_second_death_signal_during_the_kill_waits_for_the_first_to_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A multithreaded worker's death signals the trampoline once per ending thread: the second
    # signal's handler runs inside the first's kill. Were it to kill the group itself, the
    # trampoline would die before the first had killed every descendant.
    steps: list[str] = []

    def kill_tree(root: int) -> bool:
        steps.append("tree begun")
        if steps.count("tree begun") == 1:
            reaper._kill_group(reaper.DEATH_SIGNAL, None)  # the second signal, arriving now
        steps.append("tree done")
        return True

    monkeypatch.setattr(reaper, "_options", reaper.Options())
    monkeypatch.setattr(reaper, "_killing", False, raising=False)
    monkeypatch.setattr(reaper._options, "subreaper", True)
    monkeypatch.setattr(reaper, "kill_tree", kill_tree)
    monkeypatch.setattr(os, "killpg", lambda group, sig: steps.append("group killed"))

    reaper._kill_group(reaper.DEATH_SIGNAL, None)

    assert steps == ["tree begun", "tree done", "group killed"]


def run_with_reaper_module(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter that can ``import reaper`` (its directory: argv[1])."""
    return subprocess.run(
        [sys.executable, "-c", script, str(REAPER.parent)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


WATCH_ONCE = """
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import reaper

program = subprocess.Popen(["sleep", "30"])
orphan = os.fork()  # stands for a descendant the subreaper adopted once it ended
if orphan == 0:
    os._exit(0)
reaper._options.subreaper, reaper._options.program_pid = True, program.pid
while open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.005)  # until the orphan has ended (a zombie to reap)
scans = []
listdir = os.listdir
os.listdir = lambda path=".": scans.append(path) or listdir(path)
reaper._reap_adopted()
print(os.path.exists(f"/proc/{orphan}"), "/proc" in scans, program.poll())
program.kill()
"""


def test_the_watch_reaps_an_adopted_orphan_without_reading_every_process_on_the_host() -> None:
    # Every command session's trampoline runs this watch ten times a second. Walking /proc
    # made each one read every process on the host each time: with 1,000 command sessions
    # (3,000+ processes) the trampolines alone saturated the machine (bench/scale/run.py).
    require_proc()
    done = run_with_reaper_module(WATCH_ONCE)
    # The orphan is reaped, PROGRAM is left for its own wait, and /proc was not walked.
    assert done.stdout.split() == ["False", "False", "None"]


END_WITH_NOTHING_LEFT = """
import os, sys
sys.path.insert(0, sys.argv[1])
import reaper

scans = []
listdir = os.listdir
os.listdir = lambda path=".": scans.append(path) or listdir(path)
print(reaper.kill_tree(os.getpid()), "/proc" in scans)
"""


def test_a_program_that_left_nothing_behind_ends_without_reading_every_process() -> None:
    # At its program's end every trampoline kills what the program left. Walking /proc for it
    # when nothing is left made 1,000 sessions ending together read 3,000+ processes each.
    require_proc()
    done = run_with_reaper_module(END_WITH_NOTHING_LEFT)
    assert done.stdout.split() == ["True", "False"]  # nothing left, and /proc was not walked
