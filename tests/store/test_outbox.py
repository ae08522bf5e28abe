"""The transactional outbox: a created TASK's message leaves the request path, not promise 1.

write_task queues the message in the statement (Postgres) or transaction (SQLite) that creates
the TASK; a publisher drains the queue after the commit. A TASK whose creator died between the
commit and the publish is still dispatched once: by the next drain, seeded here with an
injected clock, and by a real ``surehand api`` killed after its commit. Concurrent drains claim
disjoint rows, so each TASK is published by one of them; the sweep (the safety net) does not
publish it again within the back-off, and a duplicate message would be refused by the claim's
compare-and-set anyway (tests/store/test_sessions.py).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import redis

from surehand.dispatcher import dispatch
from surehand.dispatcher.context import Services
from surehand.dispatcher.outbox_publisher import OutboxPublisher, pause_before_drain
from surehand.dispatcher.submissions import write_task
from surehand.errors import PublishFailed
from surehand.model import Disposition, Task
from surehand.store import Store, outbox, tasks
from surehand.testing import ManualClock
from tests.procs import free_port, private_redis, running, spawn, wait_until
from tests.shared.outbox import _answers, _session_messages, api_env, pending, published
from tests.submission_helpers import TENANT, Recording, request


def create(services: Services, sid: str) -> str:
    result = write_task(services, request(client_submission_id=sid), tenant=TENANT)
    assert result.disposition is Disposition.CREATED
    assert result.task_id is not None
    return result.task_id


def test_a_create_queues_its_message_with_the_task_and_a_publisher_takes_it_once(
    services: Services,
) -> None:
    task_id = create(services, "outbox-1")  # no publisher here: the row waits
    assert pending(services.store) == 1
    assert not published(services.store, task_id)

    recording = Recording()
    assert dispatch.drain_outbox(replace(services, publisher=recording)) == 1
    assert recording.ids == [task_id]
    assert pending(services.store) == 0
    assert published(services.store, task_id)


def test_a_task_whose_creator_died_before_publishing_is_dispatched_once(
    services: Services, clock: ManualClock
) -> None:
    # The state a crash between the commit and the publish leaves: committed receipt and
    # TASK, its outbox row, never published.
    task_id = create(services, "outbox-crash")
    recording = Recording()
    restarted = replace(services, publisher=recording)

    clock.advance(5)
    assert dispatch.sweep(restarted) == 1  # the restarted process's first sweep drains it
    clock.advance(5)
    assert dispatch.sweep(restarted) == 0  # published: not again within the back-off
    assert dispatch.drain_outbox(restarted) == 0
    retried = write_task(restarted, request(client_submission_id="outbox-crash"), tenant=TENANT)
    assert retried.disposition is Disposition.REUSED
    assert retried.task_id == task_id

    assert recording.ids == [task_id]
    assert pending(services.store) == 0


def test_a_publisher_that_died_after_taking_its_rows_is_covered_by_the_sweep(
    services: Services,
) -> None:
    task_id = create(services, "outbox-taken")
    with services.store.transaction() as connection:  # taken, then the publisher died
        assert outbox.take(connection, 10) == [task_id]
    recording = Recording()
    assert dispatch.sweep(replace(services, publisher=recording)) == 1
    assert recording.ids == [task_id]


def test_eight_concurrent_drains_publish_each_of_forty_tasks_once(services: Services) -> None:
    created = [create(services, f"outbox-race-{n}") for n in range(40)]
    recording = Recording()
    publishing = replace(services, publisher=recording)
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def drain() -> None:
        start.wait()
        try:
            dispatch.drain_outbox(publishing, limit=3)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=drain) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert Counter(recording.ids) == Counter(created)  # every TASK, each exactly once
    assert pending(services.store) == 0


class RecordingBatches:
    """A batch publisher that records each batch it was given, or raises ``error``."""

    def __init__(self, error: Exception | None = None) -> None:
        self.batches: list[list[str]] = []
        self.error = error

    def __call__(self, batch: Sequence[Task]) -> None:
        if self.error is not None:
            raise self.error
        self.batches.append([task.task_id for task in batch])


def test_a_drain_publishes_its_claimed_batch_together_when_it_can(services: Services) -> None:
    created = [create(services, f"outbox-batch-{n}") for n in range(7)]
    single, batches = Recording(), RecordingBatches()
    publishing = replace(services, publisher=single, publish_batch=batches)
    assert dispatch.drain_outbox(publishing, limit=5) == 7
    assert single.ids == []
    assert sorted(task for batch in batches.batches for task in batch) == sorted(created)
    assert [len(batch) for batch in batches.batches] == [5, 2]
    assert all(published(services.store, task_id) for task_id in created)


def test_a_batch_the_broker_refused_is_left_to_the_sweep(
    services: Services, clock: ManualClock
) -> None:
    created = [create(services, f"outbox-refused-{n}") for n in range(3)]
    refusing = replace(
        services, publisher=Recording(), publish_batch=RecordingBatches(PublishFailed("down"))
    )
    assert dispatch.drain_outbox(refusing) == 0
    assert not any(published(services.store, task_id) for task_id in created)
    assert pending(services.store) == 0  # claimed: the sweep is now what publishes them
    recording = Recording()
    clock.advance(5)
    assert dispatch.sweep(replace(services, publisher=recording)) == 3
    assert sorted(recording.ids) == sorted(created)


def test_a_batch_that_raises_otherwise_is_published_one_by_one(services: Services) -> None:
    created = [create(services, f"outbox-odd-{n}") for n in range(3)]
    single = Recording()
    odd = replace(services, publisher=single, publish_batch=RecordingBatches(ValueError("odd")))
    assert dispatch.drain_outbox(odd) == 3
    assert sorted(single.ids) == sorted(created)
    assert all(published(services.store, task_id) for task_id in created)


def test_the_background_publisher_publishes_a_create_woken_by_its_commit(
    services: Services,
) -> None:
    recording = Recording()
    publisher = OutboxPublisher(replace(services, publisher=recording), idle_seconds=3600)
    woken = replace(services, publisher=recording, wake_publisher=publisher.wake)
    publisher.start()
    try:
        task_id = create(woken, "outbox-woken")
        wait_until(lambda: recording.ids == [task_id], timeout=30, what="the woken drain")
    finally:
        publisher.stop()
    assert published(services.store, task_id)
    assert publisher.wake() is False  # stopped: creates publish on their own path again


def test_drains_start_at_most_every_spacing_and_at_once_when_idle() -> None:
    assert pause_before_drain(float("-inf"), 100.0, 0.01) == 0.0  # the first drain
    assert pause_before_drain(50.0, 100.0, 0.01) == 0.0  # idle: the last drain long ago
    assert pause_before_drain(100.0, 100.004, 0.01) == pytest.approx(0.006)  # under load


def test_creates_committed_during_the_spacing_are_published_in_one_batch(
    services: Services,
) -> None:
    """The drain after a first one waits for the spacing, so the creates committed meanwhile
    are one batch (a long spacing here, so that the three creates surely fall within it)."""
    batches = RecordingBatches()
    publishing = replace(services, publisher=Recording(), publish_batch=batches)
    publisher = OutboxPublisher(publishing, idle_seconds=3600, spacing_seconds=5.0)
    woken = replace(publishing, wake_publisher=publisher.wake)
    publisher.start()
    try:
        first = create(woken, "outbox-spaced-0")
        wait_until(lambda: batches.batches == [[first]], timeout=30, what="the first drain")
        rest = [create(woken, f"outbox-spaced-{n}") for n in range(1, 4)]
        wait_until(lambda: len(batches.batches) == 2, timeout=30, what="the spaced drain")
    finally:
        publisher.stop()
    assert sorted(batches.batches[1]) == sorted(rest)


def test_an_api_process_killed_after_the_commit_is_dispatched_once_by_the_next(
    store: Store, tmp_path: Path
) -> None:
    with private_redis(tmp_path) as server:
        # The publisher in this process: a child publisher would outlive the crash long
        # enough to drain the row itself (tests/processes/test_publisher_process.py covers it).
        env = api_env(store, server, publisher="thread")
        port = free_port()
        body = request(client_submission_id="outbox-killed")
        crashing = {**env, "SUREHAND_CRASH_AT": "write_task.after_commit"}
        with running(spawn(["api", "--port", str(port)], crashing, tmp_path / "a.log")) as api:
            wait_until(lambda: _answers(port), timeout=60, what="the first api")
            with pytest.raises(httpx.TransportError):
                httpx.post(f"http://127.0.0.1:{port}/v1/tasks", json=body, timeout=30)
            api.process.wait(timeout=30)
        with store.snapshot() as connection:
            (task,) = tasks.list_tasks(connection, tenant=None, limit=10)
        assert not task.published
        assert pending(store) == 1

        port = free_port()
        with running(spawn(["api", "--port", str(port)], env, tmp_path / "b.log")):
            wait_until(lambda: published(store, task.task_id), timeout=60, what="the drain")
            wait_until(lambda: _answers(port), timeout=60, what="the second api")
            retried = httpx.post(f"http://127.0.0.1:{port}/v1/tasks", json=body, timeout=30)
        assert retried.status_code == 200
        assert retried.json()["task_id"] == task.task_id
        client = redis.Redis.from_url(server.url)
        assert _session_messages(client) == 1
        client.close()
