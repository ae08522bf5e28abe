"""The embedded broker (``memory://``) wakes its consumer on a publish: no polling sleep.

kombu's virtual transports sleep ``polling_interval`` (one second) whenever every queue is
empty or the prefetch window is full; under ``surehand up`` that was the floor of every start.
These tests look at the mechanism, never at the clock: kombu's sleep is replaced by a counter,
and the consumer must be found waiting on the doorbell when the publish rings it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Consumer, Producer, Queue
from kombu.transport.virtual import base as virtual_base

from surehand.config import Settings
from surehand.embedded import Embedded
from surehand.queue import inprocess
from surehand.queue.celery_app import MEMORY_BROKER, make_celery
from tests.procs import wait_until


@pytest.fixture
def kombu_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every polling sleep kombu's virtual transport takes from now on (each still sleeps a
    little, so a polling loop cannot spin the test's CPU)."""
    sleeps: list[float] = []

    def counted(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(min(seconds, 0.05))

    monkeypatch.setattr(virtual_base, "sleep", counted)
    return sleeps


@dataclass
class DoorbellWaits:
    """Set when a consumer starts waiting on the doorbell; how each wait ended (True: rang)."""

    entered: threading.Event = field(default_factory=threading.Event)
    ended: list[bool] = field(default_factory=list)


@pytest.fixture
def doorbell_waits(monkeypatch: pytest.MonkeyPatch) -> DoorbellWaits:
    waits = DoorbellWaits()
    original = inprocess.Doorbell.wait

    def watched(self: inprocess.Doorbell, seen: int, timeout: float | None) -> bool:
        waits.entered.set()
        rang = original(self, seen, timeout)
        waits.ended.append(rang)
        return rang

    monkeypatch.setattr(inprocess.Doorbell, "wait", watched)
    return waits


def test_the_memory_broker_of_a_surehand_app_is_the_in_process_transport() -> None:
    app = make_celery(Settings.model_validate({"broker_url": MEMORY_BROKER}))
    with app.connection_for_read() as connection:
        assert isinstance(connection.transport, inprocess.Transport)
        assert connection.as_uri().startswith("memory://")


def test_a_publish_wakes_the_waiting_consumer_instead_of_a_polling_sleep(
    kombu_sleeps: list[float], doorbell_waits: DoorbellWaits
) -> None:
    inprocess.install()
    name = f"surehand.wake-{uuid.uuid4().hex}"
    queue = Queue(name, routing_key=name)
    received: list[Any] = []
    # an hour between polls: only the doorbell can bring the message in this test's time
    options = {"polling_interval": 3600.0}
    with (
        Connection(MEMORY_BROKER, transport_options=options) as consuming,
        Consumer(consuming, [queue], callbacks=[lambda body, msg: received.append(body)]),
    ):
        consumer = threading.Thread(target=consuming.drain_events, kwargs={"timeout": 7200})
        consumer.start()
        assert doorbell_waits.entered.wait(30), "the consumer never waited on the doorbell"
        with Connection(MEMORY_BROKER) as publishing:
            Producer(publishing).publish({"n": 1}, routing_key=name, declare=[queue])
        consumer.join(60)
    assert not consumer.is_alive()
    assert received == [{"n": 1}]
    assert doorbell_waits.ended == [True]  # woken by the ring, not by the end of its wait
    assert kombu_sleeps == []


def test_an_ack_rings_the_doorbell_a_full_prefetch_window_waits_on() -> None:
    inprocess.install()
    name = f"surehand.window-{uuid.uuid4().hex}"
    queue = Queue(name, routing_key=name)
    with Connection(MEMORY_BROKER) as connection:
        channel = connection.default_channel
        Producer(channel).publish({"n": 1}, routing_key=name, declare=[queue])
        message = queue(channel).get()
        assert message is not None
        rings = inprocess.DOORBELL.rings
        message.ack()
    assert inprocess.DOORBELL.rings > rings


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Embedded]:
    settings = Settings.model_validate({"home": tmp_path, "redis_url": "", "broker_url": ""})
    runtime = Embedded(settings, with_api=False, concurrency=2)
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


def test_surehand_up_starts_submitted_tasks_with_no_polling_sleep(
    up: Embedded, kombu_sleeps: list[float]
) -> None:
    ids = [
        str(up.sh.write_task(sender="PM", recipient="DEV", subject=f"wake {n}").task_id)
        for n in range(5)
    ]

    def all_in_review() -> bool:
        return all(up.sh.get_task(task_id).bucket == "review" for task_id in ids)

    wait_until(all_in_review, timeout=60)
    assert kombu_sleeps == []
