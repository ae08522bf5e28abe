"""``surehand check``: can this configuration run? Database, migrations, Redis, broker, agents.

Each check says what it found and, when something is wrong, what to do about it. Exit 0 when
nothing failed (warnings are fine), 1 otherwise, so it can gate a deploy or a healthcheck.
It only reads: a SQLite store that does not exist yet is reported, never created.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from surehand.cli.app import app
from surehand.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    DatabaseUrl,
    JsonFlag,
    console,
    emit_json,
    handle_errors,
)
from surehand.errors import ConfigError, SurehandError

if TYPE_CHECKING:  # the checks import what they check when they run (CLI start-up time)
    from rich.table import Table

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


AGENT_FIX = (
    "set SUREHAND_AGENTS: ROLE=demo (built-in demo), ROLE=command with "
    "SUREHAND_COMMAND_AGENT, or ROLE=package.module:function; e.g. DEV=demo,QA=command"
)


def is_deployment(settings: Settings) -> bool:
    """A shared broker: workers in other processes, so nothing falls back to `up`'s defaults."""
    return bool(settings.broker_url) and not settings.broker_url.startswith("memory")


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


def check_agents(settings: Settings, roles: list[str]) -> list[Check]:
    """The agent of each served role (SUREHAND_ROLES, else every role in SUREHAND_AGENTS) with
    the probes its module registers. A deployment has no default agent: none is a failure."""
    specs = _agent_specs(settings.agents)
    if not specs and not roles and not is_deployment(settings):
        return [
            Check(
                "agents",
                "ok",
                "none configured: `surehand up` runs the demo agent for DEV, QA and OPS",
                "set SUREHAND_AGENTS to run your own handlers",
            )
        ]
    if not specs and not roles:
        detail = "SUREHAND_AGENTS is empty: workers refuse to start (no default agent)"
        return [Check("agents", "fail", detail, AGENT_FIX)]
    return [_agent_check(settings, role, specs.get(role)) for role in roles or list(specs)]


def _agent_specs(agents: str) -> dict[str, str]:
    """SUREHAND_AGENTS as role -> target (``demo``, ``command`` or ``module:function``)."""
    pairs = (item.partition("=") for item in agents.split(",") if item.strip())
    return {role.strip(): target.strip() for role, _, target in pairs}


def _agent_check(settings: Settings, role: str, target: str | None) -> Check:
    name = f"agent {role}"
    if target is None:
        return Check(name, "fail", "no agent for this role: its worker refuses to start", AGENT_FIX)
    from surehand.agents.builtin import register_builtin_agents  # only `check` needs them
    from surehand.agents.registry import AgentRegistry
    from surehand.runtime import session_door

    registry = AgentRegistry()
    register_builtin_agents(registry, settings, session_door())
    try:
        registry.load(f"{role}={target}")
    except SurehandError as error:
        return Check(name, "fail", error.message, "fix SUREHAND_AGENTS")
    probes = ", ".join(registry.probe_names()) or "none"
    return Check(name, "ok", f"{_describe_agent(settings, target)}; probes: {probes}")


def _describe_agent(settings: Settings, target: str) -> str:
    if target == "demo":
        return "demo (built-in demo agent)"
    if target == "command":
        return f"command: {settings.command_agent} (SUREHAND_COMMAND_AGENT)"
    return target


def check_agent_programs(settings: Settings) -> list[Check]:
    """With a command agent configured: how its programs run here (sandbox, limits, user) and
    the environment variable names they receive from the worker."""
    if "command" not in _agent_specs(settings.agents).values():
        return []
    from surehand.agents.launch import Confinement  # only command agents need it

    try:
        confinement = Confinement.from_settings(settings)
    except SurehandError as error:
        return [Check("agent programs", "fail", error.message, "fix the setting it names")]
    found = {
        line.split(" ", 1)[0]: Check(f"agent {line.split(' ', 1)[0]}", "ok", line.split(" ", 1)[1])
        for line in confinement.describe()
    }
    if confinement.sandbox.mode != "bwrap":
        found["sandbox"] = _warn(
            found["sandbox"],
            "install bubblewrap (apt-get install bubblewrap): without it an agent sees the "
            "host's processes, files and network as the worker's user does "
            "(docs/agents/sandbox.md: What an agent can reach)",
        )
    if confinement.net.shares_host:
        found["network"] = _warn(
            found["network"],
            "let agents run in a network of their own (SUREHAND_AGENT_NETWORK=egress, the "
            "default, with bubblewrap) and list what they may reach in SUREHAND_AGENT_EGRESS; "
            "here Postgres, Redis, the API and Flower must all require credentials",
        )
    return [*found.values(), *_check_preset(settings)]


def _warn(check: Check, fix: str) -> Check:
    return replace(check, status="warn", fix=fix)


_UNATTENDED = (
    "retry_max_attempts",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "retry_overload_backoff_seconds",
    "agent_budget_usd",
)


def check_unattended(settings: Settings) -> list[Check]:
    """The retry policy and budget settings can be read (admission reads them each pass);
    nothing to report while they are all left at their defaults."""
    from surehand.config import Settings

    defaults = Settings.model_fields
    if all(getattr(settings, name) == defaults[name].default for name in _UNATTENDED):
        return []
    from surehand.agents.budgets import SETTING, role_budget
    from surehand.dispatcher.retry import check_settings
    from surehand.roles import per_role

    try:
        check_settings(settings)
        for role in {"DEV", *per_role(settings.agent_budget_usd, SETTING)[1]}:
            role_budget(settings, role)
    except SurehandError as error:
        return [Check("retry and budgets", "fail", error.message, "fix the setting it names")]
    return [Check("retry and budgets", "ok", "retry policy and budget settings read")]


def _check_preset(settings: Settings) -> list[Check]:
    """A preset (claude, codex) has what it needs: the mcp extra and its CLI on PATH."""
    from surehand.agents.command import CommandAgent
    from surehand.runtime import session_door

    try:
        agent = CommandAgent.from_settings(settings, session_door())
        if agent.program.preset is None:
            return []
        agent.require_ready()
    except SurehandError as error:
        return [Check("agent preset", "fail", error.message, "fix the setting it names")]
    return [Check("agent preset", "ok", f"{agent.program.preset}: {agent.program.base[0]}")]


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


def check_probes(settings: Settings, *, read_intents: bool = True) -> list[Check]:
    """The probes this configuration registers, and those open intents name but it lacks.

    Admission asks a probe only where it runs (workers, api, reconcile, up): an open intent
    whose probe is missing there is held after SUREHAND_PROBE_WAIT_SECONDS instead of decided.
    The built-in probes (with their versions) are registered everywhere, without settings.
    """
    from surehand.facade import Surehand

    try:
        sh = Surehand(settings=settings)
    except SurehandError:
        return []  # a database URL that does not parse: the database check says so
    try:
        # Built the way every deciding process builds it: SUREHAND_AGENTS, then SUREHAND_PROBES.
        registered = sh.registry.probe_names()
        labels = sh.registry.probe_labels()
    except ConfigError as error:
        return [Check("probes", "fail", error.message, "fix SUREHAND_PROBES / SUREHAND_AGENTS")]
    finally:
        sh.close()
    named = _probes_named_by_open_intents(settings) if read_intents else {}
    missing = {name: tasks for name, tasks in named.items() if name not in registered}
    builtin = [label for label in labels if "@" in label]
    others = [label for label in labels if "@" not in label]
    detail = f"built-in: {', '.join(builtin) or 'none'}; registered: {', '.join(others) or 'none'}"
    found = [Check("probes", "ok", detail)]
    if missing:
        found.append(_missing_probes(missing, settings))
    return found


def _probes_named_by_open_intents(settings: Settings) -> dict[str, list[str]]:
    """Probe name -> TASK ids of the open intents naming it (empty if the store cannot say)."""
    from sqlalchemy.exc import SQLAlchemyError

    from surehand.dispatcher import health
    from surehand.dispatcher.context import Services
    from surehand.store import Store

    store = Store(settings.resolved_database_url(), pool_size=1)
    try:
        return health.probes_of_open_intents(Services(store=store, settings=settings))
    except (SurehandError, SQLAlchemyError):
        return {}  # the database checks above say why
    finally:
        store.dispose()


def _missing_probes(missing: dict[str, list[str]], settings: Settings) -> Check:
    parts = []
    for name, task_ids in sorted(missing.items()):
        count = len(task_ids)
        sample = ", ".join(dict.fromkeys(task_ids[:3]))
        parts.append(f"{name!r} ({count} open intent{'s' if count > 1 else ''}, e.g. {sample})")
    return Check(
        "probes-not-registered",
        "warn",
        "open intents name probes not registered in this process: " + "; ".join(parts),
        "register them in every worker and api process (SUREHAND_PROBES=name=module:function, "
        "or @sh.probe in the agents module); an interrupted session's case waits "
        f"{settings.probe_wait_seconds:g}s (SUREHAND_PROBE_WAIT_SECONDS) for one, then holds",
    )


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
