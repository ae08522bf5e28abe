"""The Celery app: settings that the design depends on, queues per role, priorities, publishing.

Publishing is checked end to end over kombu's in-process memory transport: the message is
consumed back with kombu and its routing, priority and headers inspected.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from kombu import Connection, Producer

from surehand.config import Settings
from surehand.errors import ConfigError, PublishFailed
from surehand.model import Priority
from surehand.queue.celery_app import (
    REDIS_TRANSPORT_OPTIONS,
    SESSION_TASK_NAME,
    celery_priority,
    configure_worker_queues,
    make_celery,
    publish_session,
    queue_for_role,
    role_queue,
)
from surehand.queue.transport import Channel as TransportChannel
from surehand.queue.transport import Transport as TransportClass
from surehand.requests import parse_task_request
from tests.procs import private_redis
from tests.redis_fixtures import real_redis_url

TASK = "TASK-20260101-001"


def settings(broker_url: str) -> Settings:
    # model_validate rather than Settings(...): without the pydantic mypy plugin, mypy --strict
    # reads the positional Field defaults in surehand/config/ as required arguments.
    return Settings.model_validate({"broker_url": broker_url})


@pytest.fixture
def celery() -> Celery:
    return make_celery(settings(""))


@pytest.fixture
def memory_connection() -> Iterator[Connection]:
    with Connection("memory://") as connection:
        yield connection


def unique_role() -> str:
    """A role no other test publishes to: the memory transport is shared process-wide."""
    return f"R{uuid.uuid4().hex[:12].upper()}"


def test_an_empty_broker_url_means_the_in_process_memory_transport(celery: Celery) -> None:
    assert celery.conf.broker_url == "memory://"
    assert celery.conf.broker_transport_options == {}


def test_events_are_on_so_flower_sees_every_session(celery: Celery) -> None:
    assert celery.conf.worker_send_task_events is True
    assert celery.conf.task_send_sent_event is True
    assert celery.conf.task_track_started is True


def test_messages_are_acked_early_and_results_are_not_kept(celery: Celery) -> None:
    assert celery.conf.task_acks_late is False
    assert celery.conf.worker_prefetch_multiplier == 1
    assert celery.conf.result_backend is None
    assert celery.conf.task_ignore_result is True


def test_messages_are_json_on_the_default_surehand_queue(celery: Celery) -> None:
    assert celery.conf.task_serializer == "json"
    assert celery.conf.accept_content == ["json"]
    assert celery.conf.task_default_queue == "surehand"
    assert celery.conf.broker_connection_retry_on_startup is True


def test_a_redis_broker_serves_priority_steps_lowest_number_first() -> None:
    celery = make_celery(settings("redis://127.0.0.1:6379/14"))
    assert (
        celery.conf.broker_transport_options.items()
        >= {
            "priority_steps": [0, 3, 6, 9],  # one list per TASK priority, polled by every worker
            "sep": ":",
            "queue_order_strategy": "priority",
        }.items()
    )


def test_a_redis_broker_keeps_its_scheme_and_gets_the_one_client_per_channel_transport() -> None:
    celery = make_celery(settings("redis://127.0.0.1:6379/14"))
    connection = celery.connection_for_write()
    assert isinstance(connection.transport, TransportClass)
    assert connection.as_uri().startswith("redis://")  # what logs and Flower's broker view read
    assert isinstance(Connection("rediss://127.0.0.1:6380/0").transport, TransportClass)


def test_a_channel_reuses_one_client_for_its_publishes_and_acks_on_real_redis() -> None:
    url = real_redis_url()
    make_celery(settings(url))
    with Connection(url) as connection:
        channel = connection.default_channel
        assert isinstance(channel, TransportChannel)
        first = channel._create_client()
        queue = role_queue(unique_role())(channel)
        queue.declare()
        try:
            Producer(channel).publish({"n": 1}, exchange=queue.exchange, routing_key=queue.name)
            message = queue.get()
            assert message is not None
            assert message.payload == {"n": 1}
            message.ack()
            assert queue.get(no_ack=True) is None
        finally:
            queue.delete()
        assert channel._create_client() is first
        assert channel._create_client(asynchronous=True) is not first


def test_publishing_carries_on_after_the_broker_restarts(tmp_path: Path) -> None:
    """The channel's one client borrows a connection per command from its pool, as kombu's
    per-command clients did: after a restart a publish reconnects, never stays stuck."""
    with private_redis(tmp_path) as broker:
        celery = make_celery(settings(broker.url))
        celery.conf.task_publish_retry = False  # fail fast instead of kombu's retries
        role = unique_role()
        publish_session(celery, "T-before", role, Priority.P2)
        broker.restart()  # no persistence: the first message is gone with the data

        published = []
        for task in ("T-after-1", "T-after-2"):
            with contextlib.suppress(PublishFailed):  # at most the first may fail
                publish_session(celery, task, role, Priority.P2)
                published.append(task)

        options = dict(REDIS_TRANSPORT_OPTIONS)
        with Connection(broker.url, transport_options=options) as connection:
            queue = role_queue(role)(connection.default_channel)
            received = []
            while (message := queue.get(no_ack=True)) is not None:
                received.append(message.decode()[0][0])
    assert published[-1:] == ["T-after-2"]
    assert received == published


def test_a_p0_session_overtakes_queued_p3_and_p1_sessions_on_real_redis() -> None:
    url = real_redis_url()
    celery = make_celery(settings(url))
    role = unique_role()
    for task, priority in (("T-P3", Priority.P3), ("T-P1", Priority.P1), ("T-P0", Priority.P0)):
        publish_session(celery, task, role, priority)
    with Connection(url, transport_options=dict(REDIS_TRANSPORT_OPTIONS)) as connection:
        queue = role_queue(role)(connection.default_channel)
        try:
            order = [queue.get(no_ack=True).decode()[0][0] for _ in range(3)]  # type: ignore[union-attr]
        finally:
            queue.delete()
    assert order == ["T-P0", "T-P1", "T-P3"]


def test_each_role_has_its_own_queue() -> None:
    assert queue_for_role("DEV") == "surehand.DEV"
    assert queue_for_role("QA_2") == "surehand.QA_2"


@pytest.mark.parametrize(
    "role", ["", "dev", "-DEV", "DEV-", "DEV--QA", "1DEV", "DEV.QA", "DEV\n", "SYSTEM", "A" * 33]
)
def test_an_invalid_role_code_is_refused(role: str) -> None:
    with pytest.raises(ConfigError):
        queue_for_role(role)


@pytest.mark.parametrize("role", ["LEAD-QA", "DEV", "QA_2", "OPS-EU-1", "A" * 32, "PM", "ADMIN"])
def test_every_role_write_task_accepts_has_a_queue(role: str) -> None:
    """One rule: the queue takes exactly the role codes a TASK may name (issue 10, finding 4:
    write_task took LEAD-QA and the queue refused it, which stopped all dispatch)."""
    parse_task_request({"sender": "PM", "recipient": role, "subject": "s"})
    assert queue_for_role(role) == f"surehand.{role}"


def test_a_hyphenated_role_worker_consumes_its_queue(celery: Celery) -> None:
    queues = configure_worker_queues(celery, ["LEAD-QA"])
    assert [queue.name for queue in queues] == ["surehand.LEAD-QA"]


def test_a_session_for_a_hyphenated_role_arrives_on_real_redis() -> None:
    url = real_redis_url()
    celery = make_celery(settings(url))
    role = f"LEAD-{unique_role()}"
    publish_session(celery, TASK, role, Priority.P2)
    with Connection(url, transport_options=dict(REDIS_TRANSPORT_OPTIONS)) as connection:
        queue = role_queue(role)(connection.default_channel)
        try:
            message = queue.get(no_ack=True)
        finally:
            queue.delete()
    assert message is not None
    assert message.decode()[0] == [TASK]


def test_p0_is_the_most_urgent_priority_on_the_redis_transport() -> None:
    assert [celery_priority(p) for p in Priority] == [0, 3, 6, 9]


def test_a_worker_consumes_only_the_queues_of_its_roles(celery: Celery) -> None:
    queues = configure_worker_queues(celery, ["DEV", "QA", "DEV"])
    assert [queue.name for queue in queues] == ["surehand.DEV", "surehand.QA"]
    assert set(celery.amqp.queues.consume_from) == {"surehand.DEV", "surehand.QA"}
    assert [queue.routing_key for queue in celery.conf.task_queues] == [
        "surehand.DEV",
        "surehand.QA",
    ]


def test_worker_queues_can_be_set_after_the_app_has_published(celery: Celery) -> None:
    publish_session(celery, TASK, unique_role(), Priority.P2)
    configure_worker_queues(celery, ["OPS"])
    assert set(celery.amqp.queues.consume_from) == {"surehand.OPS"}


def test_a_worker_without_roles_is_refused(celery: Celery) -> None:
    with pytest.raises(ConfigError, match="role"):
        configure_worker_queues(celery, [])


def test_a_published_session_arrives_on_its_role_queue_with_its_priority(
    celery: Celery, memory_connection: Connection
) -> None:
    role = unique_role()
    queue = role_queue(role)(memory_connection.default_channel)
    queue.declare()
    message_id = publish_session(celery, TASK, role, Priority.P1, headers={"surehand_attempt": "7"})
    message = queue.get(no_ack=True)
    assert message is not None
    assert message.delivery_info["routing_key"] == f"surehand.{role}"
    properties: dict[str, Any] = message.properties  # the kombu stubs say dict[str, str]
    assert properties["priority"] == 3
    assert message.headers["task"] == SESSION_TASK_NAME
    assert message.headers["id"] == message_id
    assert message.headers["surehand_attempt"] == "7"
    args, kwargs, _embed = message.decode()
    assert (args, kwargs) == ([TASK], {})


def test_a_message_published_before_any_worker_declared_the_queue_is_kept(
    celery: Celery, memory_connection: Connection
) -> None:
    role = unique_role()
    publish_session(celery, TASK, role, Priority.P0)
    message = role_queue(role)(memory_connection.default_channel).get(no_ack=True)
    assert message is not None
    properties: dict[str, Any] = message.properties
    assert properties["priority"] == 0


def test_publishing_to_an_unreachable_broker_raises_publish_failed() -> None:
    celery = make_celery(settings("redis://127.0.0.1:1/0"))
    # Fail fast: by default kombu retries the connection for several seconds first.
    celery.conf.task_publish_retry = False
    celery.conf.broker_transport_options = {"max_retries": 1, "interval_start": 0}
    with pytest.raises(PublishFailed) as caught:
        publish_session(celery, TASK, "DEV", Priority.P2)
    assert caught.value.retryable
    assert caught.value.details["queue"] == "surehand.DEV"


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A Redis URL whose server accepts connections and never answers: a broker on the far
    side of a network partition, whose connections stay half-open."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    server.settimeout(0.2)
    stop = False

    def accept() -> None:
        while not stop:
            with contextlib.suppress(TimeoutError, OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    stop = True
    thread.join()
    for sock in [*accepted, server]:
        sock.close()


def test_a_publish_to_a_broker_that_never_answers_fails_instead_of_waiting_forever(
    silent_broker: str,
) -> None:
    celery = make_celery(settings(silent_broker))
    with pytest.raises(PublishFailed):
        publish_session(celery, "T-partitioned", "DEV", Priority.P2)
