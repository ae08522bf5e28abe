"""``surehand check``: can this configuration run? Database, migrations, Redis, broker, agents.

Each check says what it found and, when something is wrong, what to do about it. Exit 0 when
nothing failed (warnings are fine), 1 otherwise, so it can gate a deploy or a healthcheck.
It only reads: a SQLite store that does not exist yet is reported, never created.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from surehand.cli.agent_checks import (
    check_agent_programs,
    check_agents,
    check_probes,
    check_unattended,
)
from surehand.cli.app import app
from surehand.cli.checks import CONNECT_TIMEOUT_S, Check, check_broker, check_redis, is_deployment
from surehand.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    DatabaseUrl,
    JsonFlag,
    console,
    emit_json,
    handle_errors,
)
from surehand.errors import SurehandError

if TYPE_CHECKING:  # the checks import what they check when they run (CLI start-up time)
    from rich.table import Table

    from surehand.config import Settings


def missing_store(settings: Settings) -> Check | None:
    """The finding for a SQLite store that does not exist (warn for `up`, which creates it;
    fail for a deployment); None when there is one, or the database is Postgres."""
    from surehand.store.engine import sqlite_file

    path = sqlite_file(settings.resolved_database_url())
    if path is None or path.is_file():
        return None
    return Check(
        "database",
        "fail" if is_deployment(settings) else "warn",
        f"no surehand store at {path.resolve()} yet",
        "`surehand up` or `surehand db upgrade` creates it; or point SUREHAND_DATABASE_URL at "
        "the store",
    )


def check_database(settings: Settings) -> list[Check]:
    """Connect, then compare the schema's migration with the newest one shipped."""
    try:
        missing = missing_store(settings)
    except SurehandError as error:  # a URL that does not parse
        return [Check("database", "fail", error.message, "fix SUREHAND_DATABASE_URL")]
    if missing is not None:
        return [missing]
    # libpq reads this: an unreachable Postgres host fails in seconds instead of minutes.
    os.environ.setdefault("PGCONNECT_TIMEOUT", str(CONNECT_TIMEOUT_S))
    from surehand.dispatcher import health
    from surehand.dispatcher.context import Services
    from surehand.store import Store

    store = Store.from_settings(settings)
    where = store.describe()
    try:
        current = health.schema_revision(Services(store=store, settings=settings))
    except SurehandError as error:
        return [Check("database", "fail", f"{where}: {error.message}", _database_fix(error))]
    finally:
        store.dispose()
    head = health.newest_revision()
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


def _store_exists(settings: Settings) -> bool:
    """False for a SQLite file that is not there or a URL that does not parse."""
    try:
        return missing_store(settings) is None
    except SurehandError:
        return False


def _database_fix(error: SurehandError) -> str:
    if error.retryable:
        return "check SUREHAND_DATABASE_URL and that the database runs; retry when it answers"
    return "fix SUREHAND_DATABASE_URL (or the database) as the message says"


@app.command()
@handle_errors
def check(
    database_url: DatabaseUrl = None,
    redis_url: Annotated[
        str | None, typer.Option("--redis-url", envvar="SUREHAND_REDIS_URL", help="Lease Redis.")
    ] = None,
    broker_url: Annotated[
        str | None, typer.Option("--broker-url", envvar="SUREHAND_BROKER_URL", help="Broker.")
    ] = None,
    roles: Annotated[
        str,
        typer.Option(
            envvar="SUREHAND_ROLES",
            help="Comma list of roles the workers serve; each needs an agent (default: every "
            "role in SUREHAND_AGENTS).",
        ),
    ] = "",
    as_json: JsonFlag = False,
) -> None:
    """Test the database (connection, migrations), Redis (ping, Lua) and the broker; list each
    served role's agent and probes, the probes registered here (SUREHAND_PROBES,
    SUREHAND_AGENTS) and those open intents lack. Fails on a deployment (a shared broker)
    with no agent for a served role."""
    from surehand.config import Settings

    overrides = {"database_url": database_url, "redis_url": redis_url, "broker_url": broker_url}
    settings = Settings().model_copy(update={k: v for k, v in overrides.items() if v is not None})
    checks = [*check_database(settings), *check_redis(settings), *check_broker(settings)]
    checks += check_agents(settings, [role.strip() for role in roles.split(",") if role.strip()])
    checks += check_agent_programs(settings)
    checks += check_unattended(settings)
    stored = _store_exists(settings)  # nothing below may create a missing store
    from surehand.cli.dispatch_check import check_dispatch  # imports Celery

    # Undispatchable TASKs and roles nobody claims (dispatch_check.py): warnings, never fails.
    checks += [Check(*finding) for finding in check_dispatch(settings)] if stored else []
    checks += check_probes(settings, read_intents=stored)
    ok = all(item.status != "fail" for item in checks)
    if as_json:
        emit_json({"ok": ok, "checks": [asdict(item) for item in checks]})
    else:
        console.print(_table(checks))
        console.print("[green]ready[/]" if ok else "[red]not ready[/]: see the fix column")
    raise typer.Exit(EXIT_OK if ok else EXIT_ERROR)


def _table(checks: list[Check]) -> Table:
    from rich.table import Table

    style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
    table = Table(title="surehand check")
    for column in ("check", "status", "found", "fix"):
        table.add_column(column)
    for item in checks:
        table.add_row(item.name, f"[{style[item.status]}]{item.status}[/]", item.detail, item.fix)
    return table
