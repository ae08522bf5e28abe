"""``surehand check``: can this configuration run? Database, migrations, Redis, broker.

Each check says what it found and, when something is wrong, what to do about it. Exit 0 when
nothing failed (warnings are fine), 1 otherwise, so it can gate a deploy or a healthcheck.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Annotated, Literal

import typer
from kombu import Connection
from rich.table import Table

from surehand.cli.app import app
from surehand.cli.common import EXIT_ERROR, EXIT_OK, DatabaseUrl, JsonFlag, console, emit_json
from surehand.cli.dispatch_check import check_dispatch
from surehand.config import Settings
from surehand.errors import SurehandError
from surehand.queue.celery_app import MEMORY_BROKER
from surehand.queue.leases import LeaseStore
from surehand.queue.redis_client import connect_redis
from surehand.store import Store, migrate

Status = Literal["ok", "warn", "fail"]
CONNECT_TIMEOUT_S = 5


@dataclass(frozen=True)
class Check:
    """One finding: what was checked, ok/warn/fail, what was found and what to do."""

    name: str
    status: Status
    detail: str
    fix: str = ""


def check_database(settings: Settings) -> list[Check]:
    """Connect, then compare the schema's migration with the newest one shipped."""
    # libpq reads this: an unreachable Postgres host fails in seconds instead of minutes.
    os.environ.setdefault("PGCONNECT_TIMEOUT", str(CONNECT_TIMEOUT_S))
    store = Store(settings.resolved_database_url(), pool_size=settings.database_pool_size)
    where = store.describe()
    try:
        current = migrate.current_revision(store.engine)
    except SurehandError as error:
        return [
            Check("database", "fail", f"{where}: {error.message}", "check SUREHAND_DATABASE_URL")
        ]
    finally:
        store.dispose()
    head = migrate.head_revision()
    found = [Check("database", "ok", f"{where} ({store.dialect}) answers")]
    if current == head:
        found.append(Check("migrations", "ok", f"at {head}, the newest"))
    elif store.dialect == "sqlite":
        found.append(
            Check(
                "migrations",
                "warn",
                f"at {current or 'none'}; newest is {head}",
                "nothing to do: an embedded SQLite file migrates itself on first use",
            )
        )
    else:
        found.append(
            Check(
                "migrations",
                "fail",
                f"at {current or 'none'}; newest is {head}",
                "run `surehand db upgrade` (before starting workers of this version)",
            )
        )
    return found


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


@app.command()
def check(
    database_url: DatabaseUrl = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis-url", envvar="SUREHAND_REDIS_URL", help="Lease Redis.")
    ] = None,
    broker_url: Annotated[
        str | None, typer.Option("--broker-url", envvar="SUREHAND_BROKER_URL", help="Broker.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Test the database (connection, migrations), Redis (ping, Lua) and the broker."""
    overrides = {"database_url": database_url, "redis_url": redis_url, "broker_url": broker_url}
    settings = Settings().model_copy(update={k: v for k, v in overrides.items() if v is not None})
    checks = [*check_database(settings), *check_redis(settings), *check_broker(settings)]
    # Undispatchable TASKs and roles nobody claims (dispatch_check.py): warnings, never fails.
    checks += [Check(*finding) for finding in check_dispatch(settings)]
    ok = all(item.status != "fail" for item in checks)
    if as_json:
        emit_json({"ok": ok, "checks": [asdict(item) for item in checks]})
    else:
        console.print(_table(checks))
        console.print("[green]ready[/]" if ok else "[red]not ready[/]: see the fix column")
    raise typer.Exit(EXIT_OK if ok else EXIT_ERROR)


def _table(checks: list[Check]) -> Table:
    style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
    table = Table(title="surehand check")
    for column in ("check", "status", "found", "fix"):
        table.add_column(column)
    for item in checks:
        table.add_row(item.name, f"[{style[item.status]}]{item.status}[/]", item.detail, item.fix)
    return table
