"""Real processes: ``surehand worker`` on a private redis-server broker, real Redis leases, and
the test store (SQLite file or Postgres) shared with this process.

Every test starts its own redis-server (tests/procs.py) so that no queue is shared with other
tests or with the shared Redis; leases live in database 1 of the same private server.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from surehand.dispatcher.context import Services
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket, EventKind, OperationState
from surehand.store import Store
from tests.procs import Proc, RedisServer, running, start_worker, wait_until
from tests.session_helpers import (
    REPO,
    RUNS_FILE_ENV,
    attempts_of,
    committed_task,
    events_of,
    operations_of,
    read_task,
    reports_of,
    run_lines,
)
from tests.shared.workers import worker_env

pytestmark = pytest.mark.slow


class EventLog:
    """Captures Celery events from the broker in a thread (what Flower consumes)."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._run, name="event-log", daemon=True)

    def _run(self) -> None:
        with self.app.connection_for_read() as connection:
            self._receiver = self.app.events.Receiver(connection, handlers={"*": self._collect})
            # wakeup=True asks the workers for a heartbeat once the receiver is subscribed.
            self._receiver.capture(limit=None, timeout=None, wakeup=True)

    def _collect(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def types(self, uuid: str | None = None) -> list[str]:
        return [e["type"] for e in list(self.events) if uuid is None or e.get("uuid") == uuid]

    def __enter__(self) -> EventLog:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(timeout=10)


def wait_for_bucket(store: Store, task_id: str, bucket: Bucket, worker: Proc) -> None:
    def there() -> bool:
        if worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
        return read_task(store, task_id).bucket is bucket

    wait_until(there, timeout=90, what=f"{task_id} to reach {bucket.value}")


def test_a_committed_task_runs_on_a_worker_process_and_lands_in_review(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    env = worker_env(store, broker, tmp_path, SUREHAND_AGENTS="DEV=demo")
    with (
        running(start_worker(env, tmp_path / "worker.log")) as worker,
        EventLog(client.celery) as log,
    ):
        wait_until(lambda: "worker-heartbeat" in log.types(), timeout=30, what="the event receiver")
        created = client.write_task(
            sender="PM",
            recipient="DEV",
            subject="Write the answer",
            body="Write the answer file.",
            client_submission_id="e2e-1",
        )
        task_id = created.task_id
        assert task_id is not None
        wait_for_bucket(store, task_id, Bucket.REVIEW, worker)
        wait_until(
            lambda: "task-succeeded" in log.types(),
            timeout=30,
            what="the task-succeeded event",
        )

    task = read_task(store, task_id)
    assert (task.bucket, task.epoch, task.published) == (Bucket.REVIEW, 1, True)
    [attempt] = attempts_of(store, task_id)
    assert attempt.state is AttemptState.SUCCEEDED
    assert attempt.agent_returned is True
    [report] = reports_of(store, task_id)
    assert report.body.startswith(f"Demo agent handled {task_id} ('Write the answer')")
    assert report.attempt_id == attempt.attempt_id
    [op] = operations_of(store, task_id)
    assert (op.name, op.state, op.attempt_id) == (
        "write_file",
        OperationState.SUCCEEDED,
        attempt.attempt_id,
    )
    answer = tmp_path / "sessions" / task_id / "answer.txt"
    assert op.external_receipt == f"file:{answer}"
    assert answer.read_text() == "Done: Write the answer\n"
    assert client.leases.holder(task_id) is None
    # Flower's view: the session is a named Celery task that was sent, started and finished.
    [succeeded] = [e for e in log.events if e["type"] == "task-succeeded"]
    session_events = log.types(succeeded["uuid"])
    assert {"task-received", "task-started", "task-succeeded"} <= set(session_events)
    assert "'outcome': 'settled'" in succeeded["result"]
    [sent] = [e for e in log.events if e["type"] == "task-sent"]
    assert (sent["name"], sent["uuid"], sent["queue"]) == (
        "surehand.run_session",
        succeeded["uuid"],
        "surehand.DEV",
    )
    assert task_id in sent["args"]
    assert "task events: ON" in worker.output()


def test_ten_duplicate_messages_for_one_task_make_one_attempt_and_one_agent_run(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    runs = tmp_path / "runs.txt"
    env = worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=tests.session_helpers:counting_agent",
        **{RUNS_FILE_ENV: str(runs)},
    )
    # Created without a publisher: every message below is one of the ten duplicates.
    task_id = committed_task(Services(store=store))
    task = read_task(store, task_id)

    with running(start_worker(env, tmp_path / "worker.log", concurrency=4)) as worker:
        for _ in range(10):
            client.publish(task)
        wait_for_bucket(store, task_id, Bucket.REVIEW, worker)
        wait_until(
            lambda: len(events_of(store, task_id, EventKind.CLAIM_REFUSED)) >= 9,
            timeout=60,
            what="every duplicate to be refused",
        )

    assert len(run_lines(runs)) == 1
    [attempt] = attempts_of(store, task_id)
    assert attempt.state is AttemptState.SUCCEEDED
    [op] = operations_of(store, task_id)
    assert op.name == "note_run"
    refused = events_of(store, task_id, EventKind.CLAIM_REFUSED)
    assert len(refused) == 9
    assert len({e.data["message_id"] for e in refused}) == 9
    assert len(reports_of(store, task_id)) == 1


README_AGENTS_MODULE = """
from surehand import Surehand

sh = Surehand.from_env()  # as the README writes it: a handle of the module's own


@sh.agent("DEV")
def dev(ctx):
    ctx.operation("note", {"task": ctx.task.task_id}, lambda: "noted")
    return "Did the work."
"""


def test_the_readmes_agent_module_with_its_own_handle_runs_under_a_real_worker(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    # The module SUREHAND_AGENTS names builds a handle whose registry loads SUREHAND_AGENTS
    # while the module is being imported: once a circular import that stopped the worker.
    (tmp_path / "readme_agents.py").write_text(README_AGENTS_MODULE, encoding="utf-8")
    env = worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=readme_agents:dev",
        PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}",
    )
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        created = client.write_task(sender="PM", recipient="DEV", subject="Do the work")
        assert created.task_id is not None
        wait_for_bucket(store, created.task_id, Bucket.REVIEW, worker)

    [report] = reports_of(store, created.task_id)
    assert report.body == "Did the work."
    assert [op.name for op in client.operations(created.task_id)] == ["note"]
