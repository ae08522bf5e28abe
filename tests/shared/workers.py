"""What other test modules need from ``tests/processes/test_workers.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from surehand.config import Settings
from surehand.facade import Surehand
from surehand.store import Store
from tests.procs import RedisServer, private_redis
from tests.session_helpers import REPO
from tests.shared.marks import marked


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    with private_redis(tmp_path) as server:
        yield server


def lease_url(broker: RedisServer) -> str:
    return f"redis://127.0.0.1:{broker.port}/1"


@contextmanager
def reconciler_handle(store: Store, broker: RedisServer, **settings: str) -> Iterator[Surehand]:
    """A handle on the workers' store, broker and leases that finds lost sessions at once, with
    the reconciler's own ``settings`` (its retry policy, say), closed when the block ends."""
    validated = Settings.model_validate(
        {
            "database_url": store.url,
            "broker_url": broker.url,
            "redis_url": lease_url(broker),
            "lost_grace_seconds": 0.0,
            **settings,
        }
    )
    handle = Surehand(settings=validated)
    try:
        yield handle
    finally:
        handle.close()


def worker_env(store: Store, broker: RedisServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A worker's environment; a command agent's program receives the ``AGENT_*`` variables of
    ``extra`` and may write in ``tmp_path`` (its sessions' directories stay hidden)."""
    passed = ",".join(name for name in extra if name.startswith("AGENT_"))
    return {
        "SUREHAND_DATABASE_URL": store.url,
        "SUREHAND_BROKER_URL": broker.url,
        "SUREHAND_REDIS_URL": lease_url(broker),
        "SUREHAND_WORK_DIR": str(tmp_path / "sessions"),
        "SUREHAND_HEARTBEAT_SECONDS": "1",
        "SUREHAND_AGENT_ENV": passed,
        "SUREHAND_AGENT_BIND": str(tmp_path),
        "PYTHONPATH": str(REPO),
        **extra,
    }


@pytest.fixture
def client(store: Store, broker: RedisServer) -> Iterator[Surehand]:
    """This process's handle on the same store, broker and lease Redis as the workers."""
    settings = Settings.model_validate(
        {"database_url": store.url, "broker_url": broker.url, "redis_url": lease_url(broker)}
    )
    handle = Surehand(settings=settings)
    yield handle
    handle.close()


@pytest.fixture
def reconciling_client(store: Store, broker: RedisServer) -> Iterator[Surehand]:
    """A handle on the workers' store, broker and leases that finds lost sessions at once."""
    with reconciler_handle(store, broker) as handle:
        yield handle


@pytest.fixture
def deciding_client(
    request: pytest.FixtureRequest, store: Store, broker: RedisServer
) -> Iterator[Surehand]:
    """The reconciler's process: it decides admissions, so it has the retry settings a
    ``retry_settings`` marker gives."""
    with reconciler_handle(store, broker, **marked(request, "retry_settings")) as handle:
        yield handle
