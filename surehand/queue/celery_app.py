"""The Celery app: transport, events and routing for session messages. No task bodies here.

Celery is our transport and event source only. Its own delivery guarantees are not relied on:
a session claims its TASK with a compare-and-set in the store, so duplicate messages are
harmless, and a lost session is recovered by the reconciler from recorded effect facts, not by
the broker redelivering the message (see DESIGN.md sections 5 and 6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from celery import Celery
from kombu import Exchange, Queue
from kombu.exceptions import KombuError

from surehand.config import Settings
from surehand.errors import ConfigError, PublishFailed
from surehand.model import Priority
from surehand.queue import inprocess, transport
from surehand.roles import role_problem

SESSION_TASK_NAME = "surehand.run_session"
DEFAULT_QUEUE = "surehand"
MEMORY_BROKER = "memory://"
QUEUE_PREFIX = "surehand."

# Kombu's Redis transport emulates priorities with one list per step and serves lower numbers
# first, so P0 (most urgent) maps to 0. One step per TASK priority: a worker polls (BRPOP) one
# list per step and queue, so steps nobody publishes to would cost it on every poll.
_PRIORITY_STEPS: Mapping[Priority, int] = {
    Priority.P0: 0,
    Priority.P1: 3,
    Priority.P2: 6,
    Priority.P3: 9,
}
REDIS_TRANSPORT_OPTIONS: Mapping[str, Any] = {
    "priority_steps": sorted(_PRIORITY_STEPS.values()),
    "sep": ":",
    "queue_order_strategy": "priority",
    # A network partition leaves half-open connections behind. Without a socket timeout a
    # synchronous command on one (a task event, a publish) waits forever and the worker never
    # comes back once the network does (compose/check's partition scenario); kombu's own
    # BRPOP health check covers only the consuming connection.
    "socket_timeout": 10.0,
    "socket_connect_timeout": 5.0,
    "socket_keepalive": True,
}


def queue_for_role(role: str) -> str:
    """The Celery queue that carries sessions for recipient ``role`` (e.g. ``surehand.DEV``,
    ``surehand.LEAD-QA``). The role must pass the rule write_task applies (surehand.roles), so
    every TASK write_task accepts has a queue."""
    problem = role_problem(role)
    if problem is not None:
        raise ConfigError(f"invalid role code {role!r}: {problem}", role=role)
    return f"{QUEUE_PREFIX}{role}"


def celery_priority(priority: Priority) -> int:
    """The message priority for a TASK priority on the Redis transport (lower = sooner)."""
    return _PRIORITY_STEPS[Priority(priority)]


def make_celery(settings: Settings) -> Celery:
    """A Celery app for ``settings.broker_url``; empty means the in-process memory transport."""
    broker = settings.broker_url or MEMORY_BROKER
    app = Celery("surehand", broker=broker, set_as_current=False)
    app.conf.update(_base_config())
    if _is_redis_url(broker):
        app.conf.broker_transport_options = dict(REDIS_TRANSPORT_OPTIONS)
        transport.install()  # kombu's Redis transport, one redis-py client per channel
    elif urlsplit(broker).scheme == "memory":
        inprocess.install()  # kombu's memory transport, woken by a publish (no polling sleep)
    return app


def _base_config() -> dict[str, Any]:
    return {
        # We never read task results; sessions report through the store.
        "result_backend": None,
        "task_ignore_result": True,
        # Early ack: a worker that dies mid-session must NOT get its message redelivered by the
        # broker (visibility timeout), which would re-run side effects blindly. The reconciler
        # notices the lost lease and admission decides what a successor may do.
        "task_acks_late": False,
        "worker_prefetch_multiplier": 1,  # a worker reserves one session at a time
        # Events on, so Flower shows every session as it is sent, started and finished.
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_track_started": True,
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": DEFAULT_QUEUE,
        "task_create_missing_queues": True,
        "enable_utc": True,
        "timezone": "UTC",
    }


def _is_redis_url(url: str) -> bool:
    return urlsplit(url).scheme in {"redis", "rediss", "sentinel", "redis+socket"}


def role_queue(role: str) -> Queue:
    """The kombu queue declaration for one role, matching what ``publish_session`` sends to."""
    name = queue_for_role(role)
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def configure_worker_queues(app: Celery, roles: Sequence[str]) -> list[Queue]:
    """Make ``app``'s worker consume exactly the queues of ``roles``; returns them."""
    if not roles:
        raise ConfigError("a worker needs at least one role (e.g. --roles DEV,QA)")
    queues = [role_queue(role) for role in dict.fromkeys(roles)]
    app.conf.task_queues = queues
    # app.amqp.queues may already be cached from the conf before this call: update it too.
    selected = app.amqp.queues
    for queue in queues:
        if queue.name not in selected:
            selected.add(queue)
    selected.select([queue.name for queue in queues])
    return queues


@dataclass(frozen=True)
class SessionMessage:
    """One ``run_session(task_id)`` message: the TASK, its recipient role and its priority."""

    task_id: str
    role: str
    priority: Priority


def publish_session(
    app: Celery,
    task_id: str,
    role: str,
    priority: Priority,
    headers: Mapping[str, Any] | None = None,
) -> str:
    """Send ``run_session(task_id)`` to the role's queue; returns the Celery message id.

    Raises ``PublishFailed`` (retryable) when the broker cannot take the message; the TASK
    stays committed in ``inbox`` and the dispatcher sweep publishes it again.
    """
    queue = queue_for_role(role)
    try:
        return _send(app, SessionMessage(task_id, role, priority), headers)
    except (KombuError, redis.RedisError, OSError) as exc:
        raise PublishFailed(
            f"could not publish the session of {task_id} to {queue}: {type(exc).__name__}",
            task_id=task_id,
            queue=queue,
        ) from exc


def publish_sessions(app: Celery, messages: Sequence[SessionMessage]) -> list[str]:
    """Send ``run_session`` for each of ``messages``, in order; returns their message ids.

    Each message is built, routed and announced (its ``task-sent`` event) by Celery's own
    ``send_task``, exactly as :func:`publish_session` sends it. On a Redis broker kombu's
    ``Producer.batch`` defers the commands and sends them in one pipeline: one round trip
    for the batch instead of two per message (its ``LPUSH`` and the event's ``PUBLISH``).
    Brokers without batches (``memory://``, AMQP) get each message at once, as kombu does.

    Raises ``PublishFailed`` (retryable) when the broker cannot take the batch. Any of its
    messages may have been delivered (a pipeline is not atomic): the caller records none as
    published and the sweep sends them again; the worker's claim makes a duplicate harmless.
    """
    if not messages:
        return []
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            return _send_all(app, messages, producer)
    except (KombuError, redis.RedisError, OSError) as exc:
        first = messages[0].task_id
        raise PublishFailed(
            f"could not publish {len(messages)} sessions ({first}, ...): {type(exc).__name__}",
            task_id=first,
            count=len(messages),
        ) from exc


def _send_all(app: Celery, messages: Sequence[SessionMessage], producer: Any) -> list[str]:
    """``send_task`` of each message through ``producer``. Celery declares a message's queue
    on every send, which kombu's cache skips on a connection that declared it already: here
    only the first message of each queue asks (a quarter of a send's CPU, measured)."""
    ids: list[str] = []
    declared: set[str] = set()
    for message in messages:
        queue = queue_for_role(message.role)
        ids.append(_send(app, message, producer=producer, declare=queue not in declared))
        declared.add(queue)
    return ids


def _send(
    app: Celery,
    message: SessionMessage,
    headers: Mapping[str, Any] | None = None,
    producer: Any = None,
    *,
    declare: bool = True,
) -> str:
    """``send_task`` of one session message (through ``producer`` when given); without
    ``declare``, its queue is not declared again (``declare=[]``: Celery's default is None)."""
    queue = queue_for_role(message.role)
    options: dict[str, Any] = {} if declare else {"declare": []}
    result = app.send_task(
        SESSION_TASK_NAME,
        args=[message.task_id],
        queue=queue,
        routing_key=queue,
        priority=celery_priority(message.priority),
        headers=dict(headers or {}),
        producer=producer,
        **options,
    )
    return str(result.id)
