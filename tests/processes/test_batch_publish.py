"""Publishing a batch of session messages in one Redis pipeline (``publish_sessions``).

What a worker and Flower see must not change: each message of a batch is what
``publish_session`` (Celery's ``send_task``) sends for the same TASK -- headers, properties,
body, queue and priority list -- and each still has its ``task-sent`` event on the event
channel Flower listens to. Compared here as raw Redis data on a private server and as what a
real Celery worker receives. Only the round trips change: one pipeline for the whole batch.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from typing import Any

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu import Connection
from redis.client import Pipeline

from surehand.config import Settings
from surehand.errors import PublishFailed
from surehand.model import Priority
from surehand.queue.celery_app import (
    REDIS_TRANSPORT_OPTIONS,
    SESSION_TASK_NAME,
    SessionMessage,
    celery_priority,
    configure_worker_queues,
    make_celery,
    publish_session,
    publish_sessions,
    role_queue,
)
from tests.procs import RedisServer, wait_until

# Fields that differ between any two messages (a fresh id each) or two events (clocks).
_MESSAGE_IDS = {"id", "root_id", "correlation_id", "delivery_tag", "argsrepr"}
_EVENT_VARYING = {"uuid", "root_id", "timestamp", "clock", "local_received", "args"}
PRIORITIES = (Priority.P2, Priority.P0, Priority.P3, Priority.P1)


def app_on(url: str) -> Celery:
    return make_celery(Settings(broker_url=url))


def messages(prefix: str, role: str) -> list[SessionMessage]:
    return [SessionMessage(f"{prefix}-{i}", role, p) for i, p in enumerate(PRIORITIES)]


def unique_role() -> str:
    return f"BATCH{uuid.uuid4().hex[:8].upper()}"


def normalized(raw: bytes | str) -> tuple[str, dict[str, Any]]:
    """(TASK id, the message with its per-message ids removed)."""
    message = json.loads(raw)
    body = json.loads(base64.b64decode(message.pop("body")))
    for part in (message["headers"], message["properties"]):
        for key in _MESSAGE_IDS & part.keys():
            del part[key]
    return body[0][0], {**message, "body_rest": body[1:]}


def queued(client: redis.Redis, role: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Every message waiting for ``role``: TASK id -> (priority list, normalized message)."""
    found = {}
    for key in client.keys(f"surehand.{role}*"):
        for raw in client.lrange(key, 0, -1):
            task_id, message = normalized(raw)
            found[task_id] = (key, message)
    return found


class Events:
    """The ``task-sent`` events published on the channels Flower subscribes to."""

    def __init__(self, client: redis.Redis) -> None:
        self.pubsub = client.pubsub()
        self.pubsub.psubscribe("/0.celeryev/*")
        wait_until(
            lambda: self.pubsub.get_message(timeout=0.1) is not None, timeout=10, what="subscribe"
        )

    def sent(self, count: int) -> dict[str, dict[str, Any]]:
        """TASK id (from the event's args) -> the event without its varying fields."""
        found: dict[str, dict[str, Any]] = {}
        while len(found) < count:
            item = self.pubsub.get_message(timeout=5.0)
            assert item is not None, f"only {len(found)} of {count} task-sent events"
            envelope = json.loads(item["data"])
            event = json.loads(base64.b64decode(envelope["body"]))
            assert item["channel"] == b"/0.celeryev/task.sent"
            task_id = event["args"].strip("[]'")
            found[task_id] = {k: v for k, v in event.items() if k not in _EVENT_VARYING}
        return found


def test_a_batch_sends_the_same_messages_and_events_as_one_by_one(broker: RedisServer) -> None:
    app = app_on(broker.url)
    client = redis.Redis.from_url(broker.url)
    events = Events(client)
    role = unique_role()
    for message in messages("ONE", role):
        publish_session(app, message.task_id, message.role, message.priority)
    publish_sessions(app, messages("BATCH", role))

    waiting = queued(client, role)
    assert len(waiting) == 2 * len(PRIORITIES)
    for i in range(len(PRIORITIES)):
        assert waiting[f"BATCH-{i}"] == waiting[f"ONE-{i}"]
    sent = events.sent(2 * len(PRIORITIES))
    for i in range(len(PRIORITIES)):
        assert sent[f"BATCH-{i}"] == sent[f"ONE-{i}"]
        assert sent[f"BATCH-{i}"]["queue"] == f"surehand.{role}"


def test_a_batch_goes_to_redis_in_one_pipeline(
    broker: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_on(broker.url)
    role = unique_role()
    publish_sessions(app, messages("WARM", role))  # declares the queue and exchange once
    executes: list[int] = []
    commands: list[str] = []
    execute, command = Pipeline.execute, redis.Redis.execute_command

    def counting_execute(self: Pipeline, *args: Any, **kwargs: Any) -> Any:
        executes.append(len(self.command_stack))
        return execute(self, *args, **kwargs)

    def counting_command(self: redis.Redis, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, Pipeline):
            commands.append(str(args[0]))
        return command(self, *args, **kwargs)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(Pipeline, "execute", counting_execute)
    monkeypatch.setattr(redis.Redis, "execute_command", counting_command)
    publish_sessions(app, [SessionMessage(f"T-{i}", role, Priority.P2) for i in range(50)])
    assert executes == [100]  # an LPUSH and a task-sent PUBLISH per message, one round trip
    assert commands == []


def test_a_real_worker_runs_a_batch_as_it_runs_one_by_one(broker: RedisServer) -> None:
    app = app_on(broker.url)
    role = unique_role()
    received: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    # shared=False: Celery's default would add this stand-in to every app this process
    # finalizes later, where the real run_session then clashes with it (a later test's
    # publish failed with DuplicateTaskNameWarning).
    @app.task(name=SESSION_TASK_NAME, bind=True, shared=False)
    def run_session(self: Any, task_id: str) -> None:
        request = self.request
        seen = {
            "name": request.task,
            "args": list(request.args),
            "routing_key": request.delivery_info.get("routing_key"),
            "priority": request.delivery_info.get("priority"),
            "origin": request.origin,
            "retries": request.retries,
            "ignore_result": request.ignore_result,
        }
        with lock:
            received[task_id] = seen

    configure_worker_queues(app, [role])
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        for message in messages("ONE", role):
            publish_session(app, message.task_id, message.role, message.priority)
        publish_sessions(app, messages("BATCH", role))
        wait_until(lambda: len(received) == 2 * len(PRIORITIES), timeout=30, what="sessions")
    for i, priority in enumerate(PRIORITIES):
        one, batch = received[f"ONE-{i}"], received[f"BATCH-{i}"]
        assert batch == {**one, "args": [f"BATCH-{i}"]}
        assert one["routing_key"] == f"surehand.{role}"
        assert one["priority"] == celery_priority(priority)


def test_a_broker_without_batches_gets_each_message_at_once() -> None:
    app = make_celery(Settings(broker_url="memory://"))
    role = unique_role()
    ids = publish_sessions(app, messages("MEM", role))
    assert len(ids) == len(PRIORITIES)
    with app.connection_for_write() as connection:
        queue = role_queue(role)(connection.default_channel)
        got = []
        while (message := queue.get(no_ack=True)) is not None:
            got.append(message.decode()[0][0])
    assert sorted(got) == sorted(m.task_id for m in messages("MEM", role))


def test_a_batch_to_an_unreachable_broker_raises_publish_failed() -> None:
    app = make_celery(Settings(broker_url="redis://127.0.0.1:1/0"))
    app.conf.task_publish_retry = False
    app.conf.broker_transport_options = {
        **REDIS_TRANSPORT_OPTIONS,
        "max_retries": 1,
        "interval_start": 0,
    }
    with pytest.raises(PublishFailed) as caught:
        publish_sessions(app, messages("DOWN", "DEV"))
    assert caught.value.retryable


def test_a_batch_the_broker_drops_mid_way_raises_publish_failed(broker: RedisServer) -> None:
    """The pipeline's round trip fails: the caller is told, whatever reached the broker."""
    app = app_on(broker.url)
    app.conf.task_publish_retry = False
    role = unique_role()
    publish_sessions(app, messages("WARM", role))
    broker.stop()
    try:
        with pytest.raises(PublishFailed):
            publish_sessions(app, messages("LOST", role))
    finally:
        broker.start()
    with Connection(broker.url, transport_options=dict(REDIS_TRANSPORT_OPTIONS)) as connection:
        assert role_queue(role)(connection.default_channel).get(no_ack=True) is None
