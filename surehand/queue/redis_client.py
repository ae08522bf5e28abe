"""Connecting to the Redis that holds leases: a real server, or an in-process fake.

The embedded mode (no ``SUREHAND_REDIS_URL``) runs API, worker and reconciler as threads of one
process. They must all see the same leases, so every fake client is bound to one process-wide
``fakeredis.FakeServer``. A fake server dies with its process, which is fine: leases are
liveness only, and a single process has nobody to share them with.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

import fakeredis
import redis

from surehand.errors import ConfigError

FAKE_SCHEME = "fakeredis"
REAL_SCHEMES = frozenset({"redis", "rediss", "unix"})

# Timeouts bound every lease call: a heartbeat must notice an unreachable Redis well within the
# lease TTL (30 s by default) rather than hang on a dead socket.
SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
HEALTH_CHECK_INTERVAL_S = 30
POOL_CONNECTIONS = 100  # per client; callers beyond them wait for one (see _real_client)

_fake_server: fakeredis.FakeServer | None = None
_fake_lock = threading.Lock()


def connect_redis(url: str) -> redis.Redis:
    """A client for ``url``; empty or ``fakeredis://`` gives the shared in-process fake.

    No connection is opened here (redis-py connects lazily); call ``LeaseStore.ping()`` to
    check reachability with a typed error.
    """
    scheme = urlsplit(url).scheme if url else FAKE_SCHEME
    if scheme == FAKE_SCHEME:
        return _fake_client()
    if scheme in REAL_SCHEMES:
        return _real_client(url)
    raise ConfigError(
        f"SUREHAND_REDIS_URL has unsupported scheme {scheme!r}; "
        "use redis://, rediss://, unix:// or leave it empty for the in-process fake",
        setting="SUREHAND_REDIS_URL",
    )


def shared_fake_server() -> fakeredis.FakeServer:
    """The process-wide fake server (created on first use; thread safe)."""
    global _fake_server
    with _fake_lock:
        if _fake_server is None:
            _fake_server = fakeredis.FakeServer()
        return _fake_server


def _fake_client() -> redis.Redis:
    client: redis.Redis = fakeredis.FakeRedis(server=shared_fake_server(), decode_responses=True)
    return client


def _real_client(url: str) -> redis.Redis:
    # A blocking pool: redis-py's default pool refuses a caller beyond its 100 connections
    # (MaxConnectionsError) instead of letting it wait. A worker holding thousands of sessions
    # renews that many leases on one client; each call takes a connection for well under a
    # millisecond, so a renewal waits its turn (at most SOCKET_TIMEOUT_S, then it is a Redis
    # error the heartbeat retries within the TTL) rather than failing.
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=POOL_CONNECTIONS,
        timeout=SOCKET_TIMEOUT_S,
        decode_responses=True,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
    )
    return redis.Redis(connection_pool=pool)
