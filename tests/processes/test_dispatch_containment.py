"""A TASK that cannot be dispatched is contained (issue 10, finding 4).

It never stops the sweep, the reconciler, other TASKs or the request that created it; it is
marked, reported (event, metric, `surehand tasks`/`show`/`check`) and not re-published every
second. A hyphenated role code such as LEAD-QA is dispatched like any other (one rule for role
codes). TASKs for a role that no worker claims are reported as such after the back-off.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import kombu.pools
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import update

from surehand.api import create_app
from surehand.cli.dispatch_check import _served_queues, check_dispatch
from surehand.config import Settings
from surehand.dispatcher import dispatch
from surehand.doors.serving import BackgroundServer
from surehand.errors import PublishFailed
from surehand.facade import Surehand
from surehand.model import Bucket, EventKind, Task
from surehand.runtime import Runtime
from surehand.store import Store
from surehand.store.schema import tasks as tasks_table
from surehand.testing import ManualClock
from tests.procs import SUREHAND, private_redis, running, start_worker, wait_until
from tests.session_helpers import events_of

BACK_OFF_S = 60.0
Publisher = Callable[[Task], None]


@pytest.fixture(autouse=True)
def fresh_producer_pools() -> None:
    """kombu keeps one producer pool per broker URL for the whole process, and closing a
    ``Surehand`` force-closes the connection pool behind it: every later publish to
    ``memory://`` in this process would raise "Acquire on closed pool" (which this module's
    containment would then dutifully mark). Start each test with fresh pools."""
    kombu.pools.reset()


def hand(
    store: Store, clock: ManualClock, publisher: Publisher | None = None, **values: Any
) -> Surehand:
    """A handle on ``store`` publishing to the in-process memory broker (or ``publisher``)."""
    settings = Settings.model_validate(
        {
            "database_url": store.url,
            "broker_url": "memory://",
            "republish_after_seconds": BACK_OFF_S,
            **values,
        }
    )
    return Surehand(settings=settings, clock=clock, publisher=publisher)


def submit(sh: Surehand, recipient: str = "DEV", subject: str = "Fix login") -> str:
    result = sh.write_task(sender="PM", recipient=recipient, subject=subject)
    assert result.task_id is not None
    return result.task_id


def unpublished(store: Store, clock: ManualClock, *recipients: str) -> list[str]:
    """TASKs committed by a writer with no broker (as `surehand submit` next to `up`)."""
    writer = Surehand(settings=Settings(database_url=store.url), clock=clock)
    try:
        return [submit(writer, recipient, f"TASK for {recipient}") for recipient in recipients]
    finally:
        writer.close()


def store_recipient(store: Store, task_id: str, recipient: str) -> None:
    """A stored TASK whose recipient no rule accepts any more (data from an older version)."""
    with store.transaction() as connection:
        connection.execute(
            update(tasks_table).where(tasks_table.c.task_id == task_id).values(recipient=recipient)
        )


def failures(reason: str) -> float:
    labels = {"reason": reason}
    return REGISTRY.get_sample_value("surehand_dispatch_failures_total", labels) or 0.0


def raising_for(task_subject: str, error: Exception) -> Publisher:
    def publish(task: Task) -> None:
        if task.fields.subject == task_subject:
            raise error

    return publish


# -- one rule for role codes ------------------------------------------------------------------


def test_a_lead_qa_task_is_created_and_dispatched_like_any_other(
    store: Store, clock: ManualClock
) -> None:
    """write_task accepted LEAD-QA and the queue refused it: the create raised after its
    commit and every sweep failed. Now the queue takes what write_task takes."""
    sh = hand(store, clock)
    created = [submit(sh, role) for role in ("DEV", "LEAD-QA", "QA")]

    found = [sh.get_task(task_id) for task_id in created]
    assert [task.published for task in found] == [True, True, True]
    assert [task.dispatch_error for task in found] == [None, None, None]
    sh.close()


# -- containment ------------------------------------------------------------------------------


def test_a_stored_task_with_a_refused_role_is_marked_and_the_sweep_publishes_the_others(
    store: Store, clock: ManualClock
) -> None:
    first, bad, last = unpublished(store, clock, "DEV", "QA", "OPS")
    store_recipient(store, bad, "lead.qa")
    sh = hand(store, clock)
    before = failures("invalid_role")

    assert dispatch.sweep(sh.services) == 2

    assert [sh.get_task(t).published for t in (first, bad, last)] == [True, False, True]
    marked = sh.get_task(bad)
    assert marked.dispatch_error is not None
    assert marked.dispatch_error.startswith("invalid role code 'lead.qa'")
    assert marked.dispatch_error_at == clock.now()
    [event] = events_of(store, bad, EventKind.DISPATCH_FAILED)
    assert (event.by, event.reason) == ("SYSTEM", marked.dispatch_error)
    assert event.data == {"recipient": "lead.qa", "reason": "invalid_role"}
    assert failures("invalid_role") == before + 1
    assert REGISTRY.get_sample_value("surehand_undispatchable_tasks") == 1
    assert [task.task_id for task in dispatch.undispatchable(sh.services)] == [bad]
    assert sh.get_task(bad).to_dict()["dispatch_error"] == marked.dispatch_error
    sh.close()


def test_a_marked_task_is_skipped_until_its_back_off_passes_and_not_re_reported(
    store: Store, clock: ManualClock
) -> None:
    [bad] = unpublished(store, clock, "QA")
    store_recipient(store, bad, "lead.qa")
    sh = hand(store, clock)
    dispatch.sweep(sh.services)
    before = failures("invalid_role")

    clock.advance(BACK_OFF_S / 2)
    assert dispatch.sweep(sh.services) == 0
    assert failures("invalid_role") == before  # not tried again within the back-off

    retried_at = clock.advance(BACK_OFF_S)
    assert dispatch.sweep(sh.services) == 0
    assert failures("invalid_role") == before + 1
    assert sh.get_task(bad).dispatch_error_at == retried_at
    assert len(events_of(store, bad, EventKind.DISPATCH_FAILED)) == 1  # same error: one event
    sh.close()


def test_a_marked_task_is_published_and_cleared_once_its_problem_is_fixed(
    store: Store, clock: ManualClock
) -> None:
    [bad] = unpublished(store, clock, "QA")
    store_recipient(store, bad, "lead.qa")
    sh = hand(store, clock)
    dispatch.sweep(sh.services)
    store_recipient(store, bad, "QA")
    clock.advance(BACK_OFF_S + 1)

    assert dispatch.sweep(sh.services) == 1

    task = sh.get_task(bad)
    assert (task.published, task.dispatch_error, task.dispatch_error_at) == (True, None, None)
    published = events_of(store, bad, EventKind.PUBLISHED)
    assert [e.reason for e in published] == [
        "dispatched after an earlier failure: invalid role code 'lead.qa': must be a role code "
        "like DEV, PM or LEAD-QA ([A-Z][A-Z0-9_]* with optional -PART suffixes, at most 32 "
        "characters)"
    ]
    sh.close()


def test_a_publisher_error_other_than_publish_failed_marks_the_task_and_spares_the_create(
    store: Store, clock: ManualClock
) -> None:
    """The create committed its TASK before publishing: a publish error must not turn its
    answer into an error, and the TASK is marked, not left for a sweep that fails forever."""
    sh = hand(store, clock, publisher=raising_for("boom", RuntimeError("broker bug")))
    before = failures("publish_error")

    created = sh.write_task(sender="PM", recipient="DEV", subject="boom")
    fine = submit(sh, "DEV")

    assert created.disposition.value == "created"
    assert created.task_id is not None
    task = sh.get_task(created.task_id)
    assert task.dispatch_error == "publishing failed: RuntimeError: broker bug"
    assert failures("publish_error") == before + 1
    assert sh.get_task(fine).published
    assert dispatch.sweep(sh.services) == 0  # skipped within the back-off: no second error
    sh.close()


def test_a_publisher_error_is_recorded_without_the_credentials_of_a_url_it_quotes(
    store: Store, clock: ManualClock
) -> None:
    error = RuntimeError("cannot reach redis://:hunter2@broker:6379/0 now")
    sh = hand(store, clock, publisher=raising_for("boom", error))

    task_id = submit(sh, subject="boom")

    recorded = sh.get_task(task_id).dispatch_error
    assert recorded == "publishing failed: RuntimeError: cannot reach redis://***@broker:6379/0 now"
    assert "hunter2" not in str(events_of(store, task_id, EventKind.DISPATCH_FAILED))
    sh.close()


def test_publish_failed_is_retried_by_the_next_sweep_without_a_mark(
    store: Store, clock: ManualClock
) -> None:
    broker_down = [True]

    def publish(_task: Task) -> None:
        if broker_down[0]:
            raise PublishFailed("test: broker unreachable")

    sh = hand(store, clock, publisher=publish)
    task_id = submit(sh)
    assert sh.get_task(task_id).dispatch_error is None
    broker_down[0] = False

    assert dispatch.sweep(sh.services) == 1
    assert sh.get_task(task_id).published
    sh.close()


def test_a_reconciler_pass_completes_next_to_an_undispatchable_task(
    store: Store, clock: ManualClock
) -> None:
    _first, bad, _last = unpublished(store, clock, "DEV", "QA", "OPS")
    store_recipient(store, bad, "lead.qa")
    sh = hand(store, clock)

    report = sh.reconcile()

    assert report.republished == 2
    assert sh.get_task(bad).dispatch_error is not None
    assert sh.reconcile().republished == 0  # and the next pass completes too
    sh.close()


# -- HTTP --------------------------------------------------------------------------------------


@pytest.fixture
def served(store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The API on the memory broker; TASKs whose subject is "boom" fail to publish, alone or
    in the outbox publisher's batch (which then publishes its TASKs one by one)."""
    real, real_batch = Runtime.publish, Runtime.publish_batch

    def publish(self: Runtime, task: Task) -> None:
        if task.fields.subject == "boom":
            raise RuntimeError("broker bug")
        real(self, task)

    def publish_batch(self: Runtime, batch: Sequence[Task]) -> None:
        if any(task.fields.subject == "boom" for task in batch):
            raise RuntimeError("broker bug")
        real_batch(self, batch)

    monkeypatch.setattr(Runtime, "publish", publish)
    monkeypatch.setattr(Runtime, "publish_batch", publish_batch)
    settings = Settings.model_validate(
        {"database_url": store.url, "broker_url": "memory://", "api_tokens": "tok=al:PM:acme"}
    )
    sh = Surehand(settings=settings)
    server = BackgroundServer(create_app(sh), "127.0.0.1", 0).start()
    try:
        yield server.url
    finally:
        server.stop()
        sh.close()


@pytest.mark.parametrize(("recipient", "subject"), [("LEAD-QA", "Review"), ("DEV", "boom")])
def test_an_http_create_answers_201_with_the_task_committed(
    served: str, recipient: str, subject: str
) -> None:
    headers = {"Authorization": "Bearer tok", "Idempotency-Key": f"k-{recipient}"}
    body = {"sender": "PM", "recipient": recipient, "subject": subject}
    with httpx.Client(base_url=served, headers=headers, timeout=30) as client:
        created = client.post("/v1/tasks", json=body)
        assert created.status_code == 201, created.text
        path = f"/v1/tasks/{created.json()['task_id']}"

        def dispatched() -> bool:  # the server's outbox publisher runs after the answer
            shown = client.get(path).json()
            return bool(shown["published"] or shown["dispatch_error"] is not None)

        wait_until(dispatched, timeout=30, what="the outbox publisher's attempt")
        shown = client.get(path)
    assert shown.status_code == 200
    assert shown.json()["bucket"] == Bucket.INBOX.value
    assert (shown.json()["dispatch_error"] is None) is (subject != "boom")


# -- reporting: unclaimed roles, `surehand tasks`/`show`/`check` -------------------------------


def test_a_role_no_worker_claims_is_reported_after_the_back_off(
    store: Store, clock: ManualClock
) -> None:
    sh = hand(store, clock)
    task_id = submit(sh, "NOBODY")
    assert dispatch.unclaimed_roles(sh.services) == []
    assert dispatch.waiting_note(sh.services, sh.get_task(task_id)) is None

    clock.advance(BACK_OFF_S + 60)

    [unclaimed] = dispatch.unclaimed_roles(sh.services)
    assert (unclaimed.role, unclaimed.count) == ("NOBODY", 1)
    note = dispatch.waiting_note(sh.services, sh.get_task(task_id))
    assert note == "unclaimed for 2 min: no running worker serves role NOBODY, or all are busy"
    sh.close()


@pytest.fixture
def home(tmp_path: Path) -> tuple[str, Path]:
    """A SQLite store holding one undispatchable TASK, one for an unserved role created an hour
    ago, and one fresh TASK; yields (database URL, cwd)."""
    url = f"sqlite:///{tmp_path / 'surehand.sqlite3'}"
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    store = Store(url)
    store.ensure_schema()
    clock = ManualClock(an_hour_ago)
    sh = hand(store, clock, republish_after_seconds=300)
    bad, _idle = unpublished(store, clock, "QA", "NOBODY")
    store_recipient(store, bad, "lead.qa")
    dispatch.sweep(sh.services)
    sh.close()
    store.dispose()
    return url, tmp_path


def surehand(url: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUREHAND_DATABASE_URL": url, "COLUMNS": "250"}
    env.pop("SUREHAND_BROKER_URL", None)
    return subprocess.run(
        [*SUREHAND, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_tasks_show_and_check_report_the_undispatchable_task_and_the_unserved_role(
    home: tuple[str, Path],
) -> None:
    url, cwd = home
    listed = surehand(url, cwd, "tasks")
    assert listed.returncode == 0, listed.stderr
    assert "undispatchable: invalid role code 'lead.qa'" in listed.stdout
    assert "no running worker serves role NOBODY" in listed.stdout

    [bad] = [
        t for t in json.loads(surehand(url, cwd, "tasks", "--json").stdout) if t["dispatch_error"]
    ]
    shown = json.loads(surehand(url, cwd, "show", bad["task_id"], "--json").stdout)
    assert shown["dispatch_note"].startswith("undispatchable: invalid role code 'lead.qa'")
    assert [e["kind"] for e in shown["history"]].count("dispatch_failed") == 1

    checked = surehand(url, cwd, "check", "--json")
    findings = {c["name"]: c for c in json.loads(checked.stdout)["checks"]}
    assert findings["undispatchable"]["status"] == "warn"
    assert bad["task_id"] in findings["undispatchable"]["detail"]
    assert "no running worker serves role NOBODY" in findings["role NOBODY"]["detail"]
    assert checked.returncode == 0, checked.stdout  # warnings: the configuration can run


def test_check_says_nothing_about_dispatch_when_all_is_well(store: Store) -> None:
    settings = Settings.model_validate({"database_url": store.url})
    assert check_dispatch(settings) == []


@pytest.mark.slow
def test_check_asks_running_workers_which_queues_they_consume(tmp_path: Path) -> None:
    """With a shared broker, check names the queue no running worker consumes (Celery inspect
    answered by a real `surehand worker` serving OPS), instead of guessing."""
    url = f"sqlite:///{tmp_path / 'surehand.sqlite3'}"
    store = Store(url)
    store.ensure_schema()
    unpublished(store, ManualClock(datetime.now(UTC) - timedelta(hours=1)), "NOBODY")
    store.dispose()
    with private_redis(tmp_path) as broker:
        env = {**os.environ, "SUREHAND_DATABASE_URL": url, "SUREHAND_BROKER_URL": broker.url}
        env |= {"SUREHAND_REDIS_URL": broker.url, "SUREHAND_AGENTS": "OPS=demo"}
        settings = Settings.model_validate({"database_url": url, "broker_url": broker.url})
        assert _served_queues(settings) is None  # no worker answered: nothing is claimed
        with running(start_worker(env, tmp_path / "worker.log", roles="OPS")):
            served = _served_queues(settings)
            [finding] = check_dispatch(settings)
    assert served is not None
    assert "surehand.OPS" in served
    assert finding.name == "role NOBODY"
    assert "no running worker consumes surehand.NOBODY (asked Celery inspect)" in finding.detail
