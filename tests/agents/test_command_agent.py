"""The built-in ``command`` agent: a program runs once per session in a working directory that
holds the TASK; its output becomes the REPORT; a non-zero exit, a timeout or a lost lease fails
or stops it; and ``surehand effect -- CMD`` inside it records CMD as an operation."""

from __future__ import annotations

import shlex
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from surehand.agents.command import CommandAgent
from surehand.errors import AgentError, ConfigError
from surehand.model import AttemptState, Bucket, OperationState, RetryPolicy
from tests.agent_procs import (
    TWO_ATTEMPTS_AGENT,
    TWO_ATTEMPTS_ENV,
    marked,
    require_proc,
    unique_seconds,
    wait_for_processes,
)
from tests.procs import wait_until
from tests.session_helpers import (
    Harness,
    attempts_of,
    claimed,
    committed_task,
    operations_of,
    read_task,
    reports_of,
)
from tests.shared.command_agent import attempt_context, command_surehand

SUREHAND = f"{shlex.quote(sys.executable)} -m surehand"


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


@pytest.fixture(params=["bwrap", "none"])
def sandbox(request: pytest.FixtureRequest) -> str:
    """Each sandbox mode: bubblewrap, and the fallback (process group and subreaper)."""
    require_proc()
    return str(request.param)


def test_a_timeout_kills_everything_the_program_started_and_fails_the_attempt(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    monkeypatch.setattr("surehand.agents.groups.STOP_GRACE_SECONDS", 0.5)
    mark = unique_seconds()
    # The leader dies on SIGTERM; its child ignores SIGTERM, and a daemon left the group.
    sh = command_surehand(
        harness,
        tmp_path,
        f"sh -c 'trap \"\" TERM; sleep {mark}' &\n"
        f"setsid sh -c 'sleep {mark}' &\n"
        "echo ready\n"
        f"sleep {mark}\n",
        command_timeout_seconds=1.0,
        agent_sandbox=sandbox,
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "failed"
    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.state is AttemptState.FAILED
    assert attempt.error == "AgentError: command timed out after 1s and was stopped"
    assert marked(mark) == []  # the session waits until every one of them is gone
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
    assert (
        op.error == "ReportedFailure: exit 4: no space\n"
    )  # its outcome, through the session server
    error = attempts_of(sh.store, task_id)[0].error or ""
    assert error.startswith("AgentError: command exited with 1:")
    assert reports_of(sh.store, task_id) == []


def test_a_lost_lease_kills_the_commands_whole_group_and_the_session_never_settles(
    redis_harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    monkeypatch.setattr("surehand.agents.groups.STOP_GRACE_SECONDS", 0.5)
    mark = unique_seconds()
    # The grandchild ignores SIGTERM: only SIGKILL, after the grace, ends it.
    sh = command_surehand(
        redis_harness,
        tmp_path,
        f"sh -c 'trap \"\" TERM; sleep {mark}' &\n"
        f"touch {tmp_path}/started\n"
        f"sleep {mark}\necho done\n",
        agent_sandbox=sandbox,
    )
    task_id = committed_task(sh)

    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(sh.run_session, task_id)
        wait_until((tmp_path / "started").exists, timeout=30, what="the command to start")
        # "started" is written before the program's own sleep starts, and the grandchild may
        # not have exec'd its sleep yet either: wait for both, not for the file alone.
        wait_until(
            lambda: len(marked(mark)) >= 2,
            timeout=30,
            what="the program's sleep and the grandchild's to run",
        )
        sh.leases.client.delete(sh.leases.key(task_id))
        outcome = running.result(timeout=60)

    assert outcome.outcome == "lease_lost"
    assert marked(mark) == []
    task = read_task(sh.store, task_id)
    assert task.bucket is Bucket.ACTIVE
    # Not settled: the session submitted the end of its attempt (interrupted, fenced).
    assert attempts_of(sh.store, task_id)[0].state is AttemptState.INTERRUPTED
    assert reports_of(sh.store, task_id) == []


def test_an_earlier_attempts_group_is_killed_before_a_successors_program_starts(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox: str
) -> None:
    mark = unique_seconds()
    monkeypatch.setenv("AGENT_TEST_DIR", str(tmp_path))
    monkeypatch.setenv("AGENT_MARK", mark)
    script = tmp_path / "agent.sh"
    script.write_text(TWO_ATTEMPTS_AGENT, encoding="utf-8")
    settings = harness.settings(
        agent_sandbox=sandbox, agent_env=TWO_ATTEMPTS_ENV, agent_bind=str(tmp_path)
    )
    agent = CommandAgent(["sh", str(script)], settings=settings, timeout=600)
    handle = harness.surehand()
    session = claimed(handle.services, committed_task(handle))
    stop_first = threading.Event()
    first = attempt_context(harness, session, 1, stop_first)
    second = attempt_context(harness, session, 2, threading.Event())
    alive_when_second_started: list[int] = []

    def open_gate_once_second_started() -> None:
        wait_until((tmp_path / "attempt2.started").exists, timeout=60, what="attempt 2")
        alive_when_second_started.extend(marked(mark))
        (tmp_path / "gate").touch()

    with ThreadPoolExecutor(max_workers=2) as pool:
        earlier = pool.submit(agent, first)
        try:
            started = tmp_path / "attempt1.started"
            wait_until(started.exists, timeout=30, what="attempt 1's command to start")
            wait_for_processes(mark)
            first_started = marked(mark)
            gate = pool.submit(open_gate_once_second_started)
            report = agent(second)  # as if attempt 1's worker were stuck or slow to stop it
            gate.result(timeout=60)
        finally:
            stop_first.set()  # (without the fix: stop attempt 1 instead of waiting 5 minutes)
        with pytest.raises(AgentError, match="a later attempt of this TASK started here"):
            earlier.result(timeout=60)

    assert len(first_started) >= 2
    assert report == "attempt 2"
    assert alive_when_second_started == []


def test_the_command_agent_needs_a_program(harness: Harness) -> None:
    with pytest.raises(ConfigError, match="SUREHAND_COMMAND_AGENT"):
        CommandAgent([], settings=harness.settings(), timeout=1.0)


def test_an_attempt_that_finds_a_later_attempts_group_running_starts_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    script = tmp_path / "agent.sh"
    script.write_text(f'echo started >> {tmp_path}/"$SUREHAND_ATTEMPT".log\nsleep 300\n')
    settings = harness.settings(agent_bind=str(tmp_path))
    agent = CommandAgent(["sh", str(script)], settings=settings, timeout=600)
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
