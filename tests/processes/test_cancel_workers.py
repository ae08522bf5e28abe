"""Cancel, time limits and pauses with real ``surehand worker`` processes (private redis-server
broker, real Redis leases, the test store on SQLite and Postgres).

A command agent's program starts a grandchild that ignores SIGTERM and SIGHUP; its processes
are found from the host by a mark in their command lines, so "no process of the tree survives"
is checked on the host, whatever namespace the agent runs in.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import Admission, AttemptCause, AttemptState, Bucket, ReportStatus
from surehand.store import Store
from tests.agent_procs import marked, require_proc, unique_seconds, wait_for_processes
from tests.procs import SUREHAND, RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.cancel_workers import TREE_AGENT, agent_env, wait_started
from tests.shared.workers import worker_env

pytestmark = pytest.mark.slow

# Declares an effect whose command is still running (an open intent) when the cancel comes.
INTENT_AGENT = f"""\
touch "$AGENT_TEST_DIR/started"
{" ".join(SUREHAND)} effect --name charge -- sh -c "trap '' TERM HUP; sleep $AGENT_MARK"
echo charged
"""


def submit(client: Surehand, **fields: object) -> str:
    created = client.write_task(sender="PM", recipient="DEV", subject="Work", **fields)
    assert created.task_id is not None
    return created.task_id


def wait_ended(store: Store, task_id: str) -> None:
    wait_until(
        lambda: attempts_of(store, task_id)[-1].state is not AttemptState.RUNNING,
        timeout=30,
        what="the attempt to end",
    )


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_cancel_stops_the_running_agents_whole_tree_within_5s_and_ends_cancelled(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path, sandbox: str
) -> None:
    require_proc()
    mark = unique_seconds()
    env = agent_env(store, broker, tmp_path, TREE_AGENT, mark, SUREHAND_AGENT_SANDBOX=sandbox)
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        task_id = submit(client)
        wait_started(tmp_path, worker, mark)
        asked = time.monotonic()
        assert client.cancel(task_id, reason="runaway agent", actor="PM").outcome == "stopping"
        wait_until(lambda: marked(mark) == [], timeout=30, what="the agent's tree to stop")
        stopped_after = time.monotonic() - asked
        wait_until(
            lambda: read_task(store, task_id).bucket is Bucket.ARCHIVE,
            timeout=30,
            what="the TASK to be archived",
        )
    print(f"\n{sandbox}: the tree stopped {stopped_after:.2f}s after the cancel request")
    assert stopped_after < 5.0, f"the tree stopped {stopped_after:.1f}s after the cancel"
    [attempt] = attempts_of(store, task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.CANCELLED)
    [report] = reports_of(store, task_id)
    assert report.status is ReportStatus.ABORTED
    assert "Cancelled by PM" in report.body
    assert "runaway agent" in report.body
    assert client.leases.holder(task_id) is None


def test_a_cancel_during_an_open_intent_holds_the_task(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    require_proc()
    mark = unique_seconds()
    env = agent_env(store, broker, tmp_path, INTENT_AGENT, mark, SUREHAND_AGENT_SANDBOX="none")
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        task_id = submit(client)
        wait_until(lambda: len(client.operations(task_id)) == 1, timeout=60, what="the intent")
        wait_for_processes(mark)
        client.cancel(task_id, reason="stop the charge")
        wait_until(lambda: marked(mark) == [], timeout=30, what="the agent's tree to stop")
        wait_until(lambda: read_task(store, task_id).hold is not None, timeout=30, what="the hold")
        assert worker.returncode is None
    task = read_task(store, task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.cancel is not None
    [attempt] = attempts_of(store, task_id)
    assert attempt.cause is AttemptCause.CANCELLED
    [case] = client.cases(task_id=task_id)
    assert case.admission is Admission.HOLD_FOR_REVIEW
    assert reports_of(store, task_id) == []


def test_a_cancelled_inbox_task_is_never_claimed_by_a_worker(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    env = worker_env(store, broker, tmp_path, SUREHAND_AGENTS="DEV=demo")
    client.pause_role("DEV", reason="hold the queue while we cancel")
    task_id = submit(client)
    cancelled = submit(client, body="cancel me")
    client.cancel(cancelled, reason="not wanted")
    with running(start_worker(env, tmp_path / "worker.log")):
        client.resume_role("DEV")  # publishes what waited (the cancelled one is archived)
        client.publish(read_task(store, cancelled))  # and a stray message for it
        wait_until(
            lambda: read_task(store, task_id).bucket is Bucket.REVIEW,
            timeout=60,
            what="the other TASK to run",
        )
        time.sleep(1)  # the stray message has been consumed by now (one queue, in order)
    assert read_task(store, cancelled).bucket is Bucket.ARCHIVE
    assert attempts_of(store, cancelled) == []


def test_a_time_limit_stops_a_sleeping_agent_with_cause_timed_out(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    require_proc()
    mark = unique_seconds()
    env = agent_env(store, broker, tmp_path, TREE_AGENT, mark, SUREHAND_AGENT_SANDBOX="none")
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        task_id = submit(client, time_limit_seconds=2)
        wait_started(tmp_path, worker, mark)
        wait_ended(store, task_id)
        wait_until(lambda: marked(mark) == [], timeout=30, what="the agent's tree to stop")
        wait_until(lambda: read_task(store, task_id).hold is not None, timeout=30, what="the hold")
    [attempt] = attempts_of(store, task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.TIMED_OUT)
    hold = read_task(store, task_id).hold
    assert hold is not None
    assert "time limit of 2s ran out" in hold.reason


def test_a_paused_role_starts_nothing_until_resumed(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    env = worker_env(store, broker, tmp_path, SUREHAND_AGENTS="DEV=demo")
    client.pause_role("DEV", reason="provider down")
    with running(start_worker(env, tmp_path / "worker.log")):
        task_ids = [submit(client, body=f"n{n}") for n in range(3)]
        time.sleep(2)  # the worker consumes (and refuses) every message meanwhile
        assert all(attempts_of(store, t) == [] for t in task_ids)
        assert {read_task(store, t).bucket for t in task_ids} == {Bucket.INBOX}
        assert client.resume_role("DEV") == 3
        wait_until(
            lambda: {read_task(store, t).bucket for t in task_ids} == {Bucket.REVIEW},
            timeout=60,
            what="every TASK to run after the resume",
        )
