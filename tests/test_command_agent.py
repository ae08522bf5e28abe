"""The built-in ``command`` agent: a program runs once per session in a working directory that
holds the TASK; its output becomes the REPORT; a non-zero exit, a timeout or a lost lease fails
or stops it; and ``surehand effect -- CMD`` inside it records CMD as an operation."""

# ruff: noqa: F811  (test functions take the fixtures imported below)

from __future__ import annotations

import dataclasses
import shlex
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

import pytest

from surehand.agents.command import CommandAgent
from surehand.agents.context import SessionContext, SessionPort
from surehand.dispatcher.sessions import Session
from surehand.errors import AgentError, ConfigError
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket, OperationState, RetryPolicy
from tests.agent_procs import TWO_ATTEMPTS_AGENT, group_of, is_gone, live_members, require_proc
from tests.procs import wait_until
from tests.session_helpers import (  # noqa: F401  (harness fixtures)
    Harness,
    attempts_of,
    claimed,
    committed_task,
    harness,
    operations_of,
    read_task,
    redis_harness,
    reports_of,
)

SUREHAND = f"{shlex.quote(sys.executable)} -m surehand"


def command_surehand(harness: Harness, tmp_path: Path, script: str, **settings: object) -> Surehand:
    """A handle whose DEV agent is ``SUREHAND_AGENTS=DEV=command`` running ``script`` (sh)."""
    path = tmp_path / "agent.sh"
    path.write_text(script, encoding="utf-8")
    return harness.surehand(agents="DEV=command", command_agent=f"sh {path}", **settings)


def test_the_output_of_a_command_that_exits_0_becomes_the_report(
    harness: Harness, tmp_path: Path
) -> None:
    sh = command_surehand(
        harness,
        tmp_path,
        'echo "task=$SUREHAND_TASK_ID attempt=$SUREHAND_ATTEMPT role=$SUREHAND_ROLE"\n'
        'grep -q "Rotate the API keys" TASK.md && echo "TASK.md has the subject"\n'
        'test "$SUREHAND_TASK_FILE" = "$PWD/TASK.md" && echo "in the session directory"\n',
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert (outcome.outcome, outcome.bucket) == ("settled", "review")
    [report] = reports_of(sh.store, task_id)
    assert report.body == (
        f"task={task_id} attempt=1 role=DEV\nTASK.md has the subject\nin the session directory"
    )
    [attempt] = attempts_of(sh.store, task_id)
    assert (harness.work_dir / attempt.attempt_id / "TASK.md").exists()


def test_a_non_zero_exit_fails_the_attempt_with_the_error_and_writes_no_report(
    harness: Harness, tmp_path: Path
) -> None:
    sh = command_surehand(harness, tmp_path, 'echo "half done"\necho "disk full" >&2\nexit 3\n')
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "failed"
    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.state is AttemptState.FAILED
    assert attempt.error == "AgentError: command exited with 3: disk full"
    assert read_task(sh.store, task_id).bucket is Bucket.ACTIVE
    assert reports_of(sh.store, task_id) == []


def test_a_timeout_kills_the_whole_process_group_and_fails_the_attempt(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("surehand.agents.groups.STOP_GRACE_SECONDS", 0.5)
    # The leader dies on SIGTERM; its child ignores SIGTERM and would outlive it.
    sh = command_surehand(
        harness,
        tmp_path,
        "sh -c 'trap \"\" TERM; sleep 60 & echo $! > sleeper.pid; wait' &\n"
        "while [ ! -s sleeper.pid ]; do sleep 0.05; done\n"
        "echo ready\n"
        "sleep 60\n",
        command_timeout_seconds=1.0,
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "failed"
    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.state is AttemptState.FAILED
    assert attempt.error == "AgentError: command timed out after 1s and was stopped"
    sleeper = int((harness.work_dir / attempt.attempt_id / "sleeper.pid").read_text())
    wait_until(lambda: is_gone(sleeper), timeout=30, what=f"process {sleeper} to be killed")
    assert read_task(sh.store, task_id).bucket is Bucket.ACTIVE
    assert reports_of(sh.store, task_id) == []


@pytest.mark.slow
def test_surehand_effect_records_intent_and_outcome_and_runs_its_command_once(
    harness: Harness, tmp_path: Path
) -> None:
    log = tmp_path / "deploys.log"
    effect = (
        f"{SUREHAND} effect --name deploy --key deploy-1 --policy keyed -- "
        f"sh -c 'echo deployed >> {log}; echo deployed v1'\n"
    )
    sh = command_surehand(harness, tmp_path, f"set -e\n{effect}{effect}echo finished\n")
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "settled", outcome
    assert log.read_text().splitlines() == ["deployed"]
    [op] = operations_of(sh.store, task_id)
    [attempt] = attempts_of(sh.store, task_id)
    assert (op.name, op.state, op.attempt_id) == (
        "deploy",
        OperationState.SUCCEEDED,
        attempt.attempt_id,
    )
    assert (op.idempotency_key, op.retry_policy) == ("deploy-1", RetryPolicy.KEYED)
    assert op.args == {"argv": ["sh", "-c", f"echo deployed >> {log}; echo deployed v1"]}
    assert op.outcome is not None
    assert op.outcome["value"]["exit_code"] == 0
    assert op.outcome["value"]["stdout"] == "deployed v1\n"
    [report] = reports_of(sh.store, task_id)
    assert report.body == "deployed v1\ndeployed v1\nfinished"


@pytest.mark.slow
def test_a_failing_surehand_effect_is_recorded_failed_and_fails_the_session(
    harness: Harness, tmp_path: Path
) -> None:
    sh = command_surehand(
        harness,
        tmp_path,
        f"set -e\n{SUREHAND} effect --name migrate -- sh -c 'echo no space >&2; exit 4'\n"
        "echo not reached\n",
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "failed"
    [op] = operations_of(sh.store, task_id)
    assert (op.name, op.state) == ("migrate", OperationState.FAILED)
    assert op.error == "RuntimeError: exit 4: no space\n"
    error = attempts_of(sh.store, task_id)[0].error or ""
    assert error.startswith("AgentError: command exited with 1:")
    assert reports_of(sh.store, task_id) == []


def test_a_lost_lease_kills_the_commands_whole_group_and_the_session_never_settles(
    redis_harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_proc()
    monkeypatch.setattr("surehand.agents.groups.STOP_GRACE_SECONDS", 0.5)
    # The grandchild ignores SIGTERM: only SIGKILL of the group, after the grace, ends it.
    sh = command_surehand(
        redis_harness,
        tmp_path,
        "sh -c 'trap \"\" TERM; sleep 60' &\n"
        'echo "$$ $!" > pids.tmp && mv pids.tmp leader.pid\n'
        "sleep 60\necho done\n",
    )
    task_id = committed_task(sh)

    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(sh.run_session, task_id)
        wait_until(
            lambda: any(redis_harness.work_dir.glob("*/leader.pid")),
            timeout=30,
            what="the command to start",
        )
        [pid_file] = redis_harness.work_dir.glob("*/leader.pid")
        leader, grandchild = (int(pid) for pid in pid_file.read_text().split())
        group = group_of(leader)
        sh.leases.client.delete(sh.leases.key(task_id))
        outcome = running.result(timeout=60)

    assert outcome.outcome == "lease_lost"
    assert is_gone(leader)
    assert is_gone(grandchild)
    assert live_members(group) == []
    task = read_task(sh.store, task_id)
    assert task.bucket is Bucket.ACTIVE
    assert attempts_of(sh.store, task_id)[0].state is AttemptState.RUNNING
    assert reports_of(sh.store, task_id) == []


class _NoPort:
    """The programs here declare no effects and write no reports."""

    def operation(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("not expected")

    report = operation


def attempt_context(
    harness: Harness, session: Session, number: int, cancelled: threading.Event
) -> SessionContext:
    """A context for attempt ``number`` of the claimed session's TASK (1 is the claimed one)."""
    attempt = session.attempt
    if number != attempt.number:
        attempt = dataclasses.replace(attempt, attempt_id=f"{attempt.attempt_id}-{number}")
        attempt = dataclasses.replace(attempt, number=number)
    return SessionContext(
        task=session.task,
        attempt=attempt,
        port=cast(SessionPort, _NoPort()),
        cancelled=cancelled,
        work_dir=harness.work_dir / attempt.attempt_id,
    )


def test_an_earlier_attempts_group_is_killed_before_a_successors_program_starts(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_proc()
    monkeypatch.setenv("AGENT_TEST_DIR", str(tmp_path))
    script = tmp_path / "agent.sh"
    script.write_text(TWO_ATTEMPTS_AGENT, encoding="utf-8")
    agent = CommandAgent(["sh", str(script)], settings=harness.settings(), timeout=600)
    handle = harness.surehand()
    session = claimed(handle.services, committed_task(handle))
    stop_first = threading.Event()
    first = attempt_context(harness, session, 1, stop_first)
    second = attempt_context(harness, session, 2, threading.Event())
    pids = tmp_path / "attempt1.pids"

    with ThreadPoolExecutor(max_workers=1) as pool:
        earlier = pool.submit(agent, first)
        try:
            wait_until(pids.exists, timeout=30, what="attempt 1's command to start")
            group = group_of(int(pids.read_text().split()[0]))
            report = agent(second)  # as if attempt 1's worker were stuck or slow to stop it
        finally:
            stop_first.set()  # (without the fix: stop attempt 1 instead of waiting 5 minutes)
        with pytest.raises(AgentError, match="a later attempt of this TASK started here"):
            earlier.result(timeout=60)

    assert report == "attempt 2; alive:"
    assert live_members(group) == []


def test_the_command_agent_needs_a_program(harness: Harness) -> None:
    with pytest.raises(ConfigError, match="SUREHAND_COMMAND_AGENT"):
        CommandAgent([], settings=harness.settings(), timeout=1.0)


def test_an_attempt_that_finds_a_later_attempts_group_running_starts_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    script = tmp_path / "agent.sh"
    script.write_text(f'echo started >> {tmp_path}/"$SUREHAND_ATTEMPT".log\nsleep 300\n')
    agent = CommandAgent(["sh", str(script)], settings=harness.settings(), timeout=600)
    handle = harness.surehand()
    session = claimed(handle.services, committed_task(handle))
    stop_later = threading.Event()
    earlier = attempt_context(harness, session, 1, threading.Event())
    later = attempt_context(harness, session, 2, stop_later)

    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(agent, later)
        try:
            wait_until((tmp_path / "2.log").exists, timeout=30, what="attempt 2's command")
            with pytest.raises(AgentError, match="attempt 2 of this TASK runs its command"):
                agent(earlier)
        finally:
            stop_later.set()
        with pytest.raises(AgentError, match="lost its lease"):
            running.result(timeout=60)

    assert not (tmp_path / "1.log").exists()
