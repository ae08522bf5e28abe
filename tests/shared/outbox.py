"""What other test modules need from ``tests/store/test_outbox.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import httpx
import redis

from surehand.store import Store, outbox, tasks
from tests.procs import RedisServer


def pending(store: Store) -> int:
    with store.snapshot() as connection:
        return outbox.pending(connection)


def published(store: Store, task_id: str) -> bool:
    with store.snapshot() as connection:
        task = tasks.get(connection, task_id)
    assert task is not None
    return task.published


def api_env(store: Store, server: RedisServer, *, publisher: str) -> dict[str, str]:
    """A ``surehand api`` on ``store`` with ``server`` as its broker and lease Redis."""
    return {
        "SUREHAND_DATABASE_URL": store.url,
        "SUREHAND_BROKER_URL": server.url,
        "SUREHAND_REDIS_URL": server.url.rsplit("/", 1)[0] + "/1",
        "SUREHAND_API_PUBLISHER": publisher,
    }


def _session_messages(client: redis.Redis) -> int:
    keys = client.keys("surehand.DEV*")
    return sum(int(client.llen(key)) for key in keys if client.type(key) == b"list")


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False
