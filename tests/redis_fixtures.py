"""Redis fixtures for the queue tests: one contract suite, every lease backend.

A plugin of ``tests/conftest.py``: its fixtures reach every test module. Every test gets a fresh
namespace, so tests never see each other's keys on a shared Redis database, and its keys are
deleted afterwards.

Backends: the in-process fakeredis always; a real Redis when ``SUREHAND_TEST_REDIS_URL`` is set
(e.g. ``redis://127.0.0.1:6379/15``). Locally a missing URL skips the real-Redis runs; in CI
(``CI=true``) it fails them, because the Lua scripts must be proven on real Redis there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from surehand.queue.keys import namespace_pattern
from surehand.queue.leases import LeaseStore
from surehand.queue.redis_client import connect_redis
from tests.skips import missing

REDIS_URL_ENV = "SUREHAND_TEST_REDIS_URL"
FAKE = "fakeredis"
REAL = "redis"


def real_redis_url() -> str:
    """The real Redis URL for tests; skips (locally) or fails (in CI) when it is not set."""
    url = os.environ.get(REDIS_URL_ENV, "")
    if url:
        return url
    missing(f"a real Redis (set {REDIS_URL_ENV}, e.g. redis://127.0.0.1:6379/15)")


def delete_namespace(client: redis.Redis, namespace: str) -> None:
    """Remove every key of ``namespace`` (SCAN, never KEYS or FLUSHDB: the db is shared)."""
    stale = list(client.scan_iter(match=namespace_pattern(namespace), count=500))
    if stale:
        client.delete(*stale)


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses."""
    return f"test-{uuid.uuid4().hex[:16]}"


@pytest.fixture(params=[FAKE, pytest.param(REAL, marks=pytest.mark.redis)])
def redis_client(request: pytest.FixtureRequest, namespace: str) -> Iterator[redis.Redis]:
    """A client of each backend; the namespace's keys are deleted after the test."""
    url = real_redis_url() if request.param == REAL else ""
    client = connect_redis(url)
    if request.param == REAL:
        try:
            client.ping()
        except redis.RedisError as exc:
            pytest.fail(f"{REDIS_URL_ENV}={url} is set but Redis does not answer: {exc}")
    yield client
    delete_namespace(client, namespace)
    client.close()


@pytest.fixture(params=["scripts", "watch"])
def lease_store(
    request: pytest.FixtureRequest, redis_client: redis.Redis, namespace: str
) -> LeaseStore:
    """A LeaseStore per backend, using the Lua scripts and, separately, the WATCH fallback."""
    scripting = None if request.param == "scripts" else False
    return LeaseStore(redis_client, namespace, scripting=scripting)


@pytest.fixture
def fake_lease_store(namespace: str) -> Iterator[LeaseStore]:
    """A LeaseStore on the shared fakeredis only, for tests that inject failures around it."""
    client = connect_redis("")
    yield LeaseStore(client, namespace)
    delete_namespace(client, namespace)
