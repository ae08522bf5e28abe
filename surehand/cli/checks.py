"""What ``surehand check`` reports, one :class:`Check` per finding, and the checks of the
services a configuration connects to besides its database: the lease Redis and the broker.
They only read, and import what they check when they run (CLI start-up time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from surehand.errors import SurehandError

if TYPE_CHECKING:
    from surehand.config import Settings

Status = Literal["ok", "warn", "fail"]
CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class Check:
    """One finding: what was checked, ok/warn/fail, what was found and what to do."""

    name: str
    status: Status
    detail: str
    fix: str = ""


def is_deployment(settings: Settings) -> bool:
    """A shared broker: workers in other processes, so nothing falls back to `up`'s defaults."""
    return bool(settings.broker_url) and not settings.broker_url.startswith("memory")


def check_redis(settings: Settings) -> list[Check]:
    """Ping the lease Redis and run a Lua script (renew/release are scripts)."""
    if not settings.redis_url:
        return [
            Check(
                "redis",
                "warn",
                "empty SUREHAND_REDIS_URL: in-process fakeredis",
                "fine for `surehand up`; workers in several processes need a shared Redis",
            )
        ]
    from surehand.queue.leases import LeaseStore  # not at import: `surehand tasks` needs none
    from surehand.queue.redis_client import connect_redis

    client = connect_redis(settings.redis_url)
    try:
        LeaseStore(client, namespace=settings.redis_namespace).ping()
    except SurehandError as error:
        return [
            Check("redis", "fail", error.message, "check SUREHAND_REDIS_URL and that Redis runs")
        ]
    found = [Check("redis", "ok", "answers PING")]
    try:
        answer = client.eval("return 1", 0)
    except Exception as exc:  # redis-py raises ResponseError for a server without scripting
        found.append(
            Check(
                "redis-lua",
                "warn",
                f"EVAL failed: {exc}",
                "leases fall back to WATCH/MULTI; prefer a Redis with Lua",
            )
        )
    else:
        found.append(Check("redis-lua", "ok" if answer == 1 else "warn", "runs Lua scripts"))
    return found


def check_broker(settings: Settings) -> list[Check]:
    """Open (and close) a connection to the Celery broker."""
    url = settings.broker_url
    if not url:
        return [
            Check(
                "broker",
                "warn",
                "empty SUREHAND_BROKER_URL: writers publish nothing",
                "fine with `surehand up` (its sweep picks TASKs up); set it for workers",
            )
        ]
    from kombu import Connection

    from surehand.queue.celery_app import MEMORY_BROKER

    if url.startswith(MEMORY_BROKER.rstrip("/")):
        return [Check("broker", "warn", "memory:// is in-process only", "use it only with `up`")]
    connection = Connection(url, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        connection.ensure_connection(max_retries=1, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # kombu surfaces transport-specific errors
        return [
            Check(
                "broker",
                "fail",
                f"cannot connect: {type(exc).__name__}: {exc}",
                "check SUREHAND_BROKER_URL and that the broker runs",
            )
        ]
    finally:
        connection.release()
    return [Check("broker", "ok", f"{connection.as_uri()} accepts connections")]
