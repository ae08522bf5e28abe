"""Retry on evidence with real workers (issue 32, item 4): a scripted command agent that says
its model API is overloaded (as Claude Code prints a 529) fails twice and then succeeds: the
TASK ends in review after two automatic retries, each published by the reconciler once its
backoff passed (no worker sleeps on it). One that always fails is held after max_attempts,
every error listed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptCause, Bucket, EventKind, Task
from surehand.store import Store
from tests.procs import RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, events_of, read_task
from tests.shared.workers import worker_env

BACKOFF = {
    "retry_backoff_seconds": "0.5",
    "retry_overload_backoff_seconds": "1",
    "retry_declared_roles": "DEV",  # the operator says this program declares every effect
}
FLAKY = """n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}
if [ $n -le {failures} ]; then
  echo "API Error: 529 overloaded_error (run $n)"
  exit 1
fi
echo "rotated the keys on run $n"
"""


pytestmark = [pytest.mark.slow, pytest.mark.retry_settings(**BACKOFF)]


def flaky_worker_env(
    store: Store, broker: RedisServer, tmp_path: Path, failures: int
) -> dict[str, str]:
    script = tmp_path / "agent.sh"
    count = tmp_path / "runs.txt"
    script.write_text(FLAKY.format(count=count, failures=failures), encoding="utf-8")
    env = worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=f"sh {script}",
    )
    env.update({f"SUREHAND_{k.upper()}": v for k, v in BACKOFF.items()})
    return env


def until(client: Surehand, store: Store, task_id: str, worker: object, done: object) -> None:
    def reached() -> bool:
        assert getattr(worker, "returncode", None) is None, "the worker exited"
        client.reconcile()
        return bool(done(read_task(store, task_id)))  # type: ignore[operator]

    wait_until(reached, timeout=120, interval=0.2, what=f"{task_id} to settle or be held")


def flaky_task(
    store: Store,
    broker: RedisServer,
    client: Surehand,
    tmp_path: Path,
    failures: int,
    done: Callable[[Task], bool],
) -> str:
    """Run one TASK on a worker whose agent fails ``failures`` times until ``done``; its id."""
    env = flaky_worker_env(store, broker, tmp_path, failures)
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        created = client.write_task(
            sender="PM", recipient="DEV", subject="Rotate the keys", body="Rotate them."
        )
        task_id = created.task_id
        assert task_id is not None
        until(client, store, task_id, worker, done)
        return task_id


def test_an_agent_overloaded_twice_ends_in_review_after_two_automatic_retries(
    store: Store, broker: RedisServer, deciding_client: Surehand, tmp_path: Path
) -> None:
    task_id = flaky_task(
        store,
        broker,
        deciding_client,
        tmp_path,
        failures=2,
        done=lambda t: t.bucket is Bucket.REVIEW,
    )

    found = attempts_of(store, task_id)
    assert [a.cause for a in found] == [
        AttemptCause.AGENT_FAILED,
        AttemptCause.AGENT_FAILED,
        AttemptCause.RETURNED,
    ]
    assert "529" in (found[0].error or "")
    # Each retry started no sooner than its backoff: an overload waits 1 s doubled, jittered
    # between half and all of it.
    cases = sorted(deciding_client.cases(task_id=task_id), key=lambda c: c.interrupted_epoch)
    for case, waited, successor in zip(cases, (0.5, 1.0), found[1:], strict=True):
        assert case.retry_at is not None
        assert case.effect_refs["retry"]["overloaded"] is True
        ended = found[case.interrupted_epoch - 1].ended_at
        assert ended is not None
        assert (case.retry_at - ended).total_seconds() >= waited
        assert successor.started_at >= case.retry_at
    assert read_task(store, task_id).hold is None
    [report] = deciding_client.reports(task_id)
    assert report.body == "rotated the keys on run 3"


def test_an_agent_that_always_fails_is_held_after_max_attempts_with_every_error(
    store: Store, broker: RedisServer, deciding_client: Surehand, tmp_path: Path
) -> None:
    task_id = flaky_task(
        store, broker, deciding_client, tmp_path, failures=99, done=lambda t: t.hold is not None
    )

    task = read_task(store, task_id)
    assert task.hold is not None
    assert "gave up after 3 attempts" in task.hold.reason
    for run in (1, 2, 3):
        assert f"(run {run})" in task.hold.reason
    assert len(attempts_of(store, task_id)) == 3
    assert len(events_of(store, task_id, EventKind.HOLD)) == 1
