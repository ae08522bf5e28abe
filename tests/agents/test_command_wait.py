"""A command session waits for its program without polling: its thread sleeps until the program
ends or the session is cancelled, and the program's trampoline sleeps until something happens
to it. Polled, 1,000 waiting sessions woke their worker 20,000 times a second and starved the
lease renewals (issue 22); these tests count the looks, never the time."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from surehand.agents import exits
from surehand.agents.command import CommandAgent
from surehand.agents.context import Cancellation, SessionContext
from surehand.agents.groups import REAPER
from surehand.errors import AgentError
from tests.procs import wait_until
from tests.session_helpers import Harness, claimed, committed_task
from tests.shared.command_agent import attempt_context


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time a thread asks the kernel whether a child ended (``Popen``'s waits and polls)."""
    seen: list[str] = []
    for name in ("_try_wait", "_internal_poll"):
        original: Callable[..., Any] = getattr(subprocess.Popen, name)

        def counted(self: Any, *args: Any, _o: Any = original, _n: str = name, **kw: Any) -> Any:
            if threading.current_thread().name.startswith("session"):
                seen.append(_n)
            return _o(self, *args, **kw)

        monkeypatch.setattr(subprocess.Popen, name, counted)
    return seen


def session_of(
    harness: Harness, tmp_path: Path, script: str
) -> tuple[CommandAgent, SessionContext]:
    """A command agent running ``script`` (sh) and a context for one attempt, cancellable."""
    path = tmp_path / "agent.sh"
    path.write_text(script, encoding="utf-8")
    settings = harness.settings(agent_sandbox="none", agent_bind=str(tmp_path))
    agent = CommandAgent(["sh", str(path)], settings=settings, timeout=600)
    handle = harness.surehand()
    session = claimed(handle.services, committed_task(handle))
    return agent, attempt_context(harness, session, 1, Cancellation())


def test_a_waiting_session_looks_at_its_program_when_it_starts_and_ends_not_while_it_runs(
    harness: Harness, tmp_path: Path, looks: list[str]
) -> None:
    agent, ctx = session_of(harness, tmp_path, "sleep 2\necho done\n")

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="session") as pool:
        report = pool.submit(agent, ctx).result(timeout=60)

    assert report == "done"
    # at the start, at the end, and the stop's own looks; polled, it looked about 90 times
    assert len(looks) <= 6, looks


def test_a_cancellation_wakes_the_waiting_session_and_its_program_is_stopped(
    harness: Harness, tmp_path: Path, looks: list[str]
) -> None:
    agent, ctx = session_of(harness, tmp_path, f"touch {tmp_path}/started\nexec sleep 600\n")

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="session") as pool:
        running = pool.submit(agent, ctx)
        wait_until((tmp_path / "started").exists, timeout=30, what="the program to start")
        looked_while_running = list(looks)
        ctx.stop("lease_lost", "the lease was lost")  # as the heartbeat's on_lost does
        with pytest.raises(AgentError, match="the lease was lost; the command was stopped"):
            running.result(timeout=45)  # a wait nothing woke would sleep its 60 s safety nap

    # At its start only; the stop's own looks, backing off from 1 ms while the program ends,
    # are as many as a loaded machine makes them and are not counted.
    assert len(looked_while_running) <= 4, looked_while_running


def test_without_pidfds_the_session_polls_and_still_sees_its_program_end(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "pidfd_open")
    agent, ctx = session_of(harness, tmp_path, "sleep 0.3\necho done\n")

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="session") as pool:
        assert pool.submit(agent, ctx).result(timeout=60) == "done"


def test_the_exit_watch_calls_back_once_the_child_has_ended_and_leaves_it_unreaped() -> None:
    ended = threading.Event()
    child = subprocess.Popen(["sleep", "0.2"])

    assert exits.watch(child.pid, ended.set)
    assert ended.wait(30)
    assert child.poll() == 0  # the watch did not reap it: its Popen still gets the status


def test_a_cancellation_sets_the_events_lent_to_it_and_no_others() -> None:
    cancellation, lent, other = Cancellation(), threading.Event(), threading.Event()
    with cancellation.waking(lent):
        cancellation.set()
    assert cancellation.is_set()
    assert lent.is_set()
    assert not other.is_set()

    after = threading.Event()
    with cancellation.waking(after):  # lent after the cancellation: set at once
        assert after.is_set()


def test_the_trampoline_sleeps_while_its_program_runs(tmp_path: Path) -> None:
    """Woken every 0.1 s to look at its parent, a trampoline switched ~30 times in 3 s; with the
    parent-death signal armed it looks once a second. The program reads its parent's (the
    trampoline's) count of voluntary context switches before and after its 3 s sleep."""
    count = "grep ^voluntary_ctxt_switches /proc/$PPID/status | cut -f2"
    program = f"a=$({count}); sleep 3; b=$({count}); echo $((b - a)) > {tmp_path}/switches"
    trampoline = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            str(REAPER),
            "--parent",
            str(os.getpid()),
            "--",
            "sh",
            "-c",
            program,
        ],
        start_new_session=True,
    )

    assert trampoline.wait(timeout=60) == 0
    assert int((tmp_path / "switches").read_text(encoding="utf-8")) < 10
