"""The queue layer: Celery app and routing, Redis leases and heartbeats.

This package is the only code that speaks Redis or Celery. It knows nothing of the store, of
HTTP, or of what a session does; the session task itself is registered by the layer above on
the app that :func:`make_celery` returns.
"""

# A subpackage named queue is fine (DESIGN.md section 2): only a top-level one breaks kombu.
# ruff: noqa: A005

from __future__ import annotations

from typing import TYPE_CHECKING

from surehand.lazy import exports

if TYPE_CHECKING:
    from surehand.queue.celery_app import (
        SESSION_TASK_NAME,
        celery_priority,
        configure_worker_queues,
        make_celery,
        publish_session,
        queue_for_role,
        role_queue,
    )
    from surehand.queue.heartbeat import Heartbeat
    from surehand.queue.keys import generation_key, lease_key
    from surehand.queue.leases import LeaseStore
    from surehand.queue.redis_client import connect_redis

# Imported on first use (PEP 562): a process that only reads the store (``surehand tasks``)
# imports ``surehand.queue.keys`` without paying for Celery, kombu, redis and fakeredis.
_HOMES: dict[str, str] = {
    **dict.fromkeys(
        (
            "SESSION_TASK_NAME",
            "celery_priority",
            "configure_worker_queues",
            "make_celery",
            "publish_session",
            "queue_for_role",
            "role_queue",
        ),
        "surehand.queue.celery_app",
    ),
    "Heartbeat": "surehand.queue.heartbeat",
    "generation_key": "surehand.queue.keys",
    "lease_key": "surehand.queue.keys",
    "LeaseStore": "surehand.queue.leases",
    "connect_redis": "surehand.queue.redis_client",
}


__getattr__, __dir__ = exports(__name__, _HOMES)

__all__ = [
    "SESSION_TASK_NAME",
    "Heartbeat",
    "LeaseStore",
    "celery_priority",
    "configure_worker_queues",
    "connect_redis",
    "generation_key",
    "lease_key",
    "make_celery",
    "publish_session",
    "queue_for_role",
    "role_queue",
]
