"""``surehand worker | beat | reconcile``: the processes that run sessions and reconcile, and
what they check and announce at start (shared with ``surehand up``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from surehand import logjson
from surehand.cli.app import app
from surehand.cli.common import (
    DatabaseUrl,
    EmbeddedFlag,
    JsonFlag,
    console,
    emit_json,
    err_console,
    handle_errors,
    require_services,
    wait_for_store,
)
from surehand.errors import ConfigError, NoAgentForRole

if TYPE_CHECKING:  # the rest is imported by the commands that use it (CLI start-up time)
    from surehand.agents.command import CommandAgent
    from surehand.facade import Surehand

RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", envvar="SUREHAND_REDIS_URL", help="Redis for leases.")
]
BrokerUrl = Annotated[
    str | None, typer.Option("--broker-url", envvar="SUREHAND_BROKER_URL", help="Celery broker.")
]
LogLevel = Annotated[
    str, typer.Option(envvar="SUREHAND_LOGLEVEL", help="Celery log level: debug|info|warning.")
]


def open_surehand(
    *,
    database_url: str | None = None,
    redis_url: str | None = None,
    broker_url: str | None = None,
    tenant: str | None = None,
) -> Surehand:
    # The database pools keep SUREHAND_DATABASE_POOL_SIZE whatever the worker's concurrency:
    # sessions touch the database in short bursts, and threads beyond the pool wait for a
    # connection instead of each holding a Postgres backend (a 1,000-session worker filled
    # Postgres' max_connections when the pools were sized to its concurrency).
    from surehand.facade import Surehand

    return Surehand(
        database_url=database_url,
        redis_url=redis_url,
        broker_url=broker_url,
        tenant=tenant,
    )


def announce_probes(sh: Surehand) -> None:
    """Load the agents and probes now (a bad SUREHAND_AGENTS or SUREHAND_PROBES entry stops
    the process at start, not at its first admission) and say which probes it can ask."""
    names = sh.registry.probe_names()
    # One line each however long (soft_wrap): a log shipper reads the container's stderr.
    err_console.print(
        f"probes registered in this process: {', '.join(names) or 'none'}", soft_wrap=True
    )


def announce_confinement(sh: Surehand, roles: list[str]) -> list[CommandAgent]:
    """Say how the command agents' programs run here (sandbox, network, limits, user,
    environment); ConfigError now, not at the first session, if they cannot run as
    configured. The command agents, for more checks."""
    from surehand.agents.cgroups import sweep_empty
    from surehand.agents.command import CommandAgent

    agents = {sh.registry.get(role).handler for role in roles}
    commands = [agent for agent in agents if isinstance(agent, CommandAgent)]
    if commands:
        sweep_empty()  # cgroups a killed worker on this host left behind
    for agent in commands:
        agent.require_ready()  # a preset without its extra or CLI stops the worker here
    for agent in commands[:1]:  # one configuration per process
        for line in agent.confinement.describe():
            err_console.print(f"agent programs: {line}", highlight=False, soft_wrap=True)
    return commands


def require_agents(sh: Surehand, roles: list[str]) -> None:
    """Every role this worker serves has an agent, or NoAgentForRole listing the choices.

    No default agent here (unlike `surehand up`, whose demo agent suits a trial): a deployment
    worker that silently ran the demo agent would answer real TASKs with fake REPORTs."""
    from surehand.dispatcher.stops import role_time_limits

    role_time_limits(sh.settings.role_time_limits)  # a bad SUREHAND_ROLE_TIME_LIMITS: now
    missing = [role for role in roles if role not in sh.registry.roles()]
    if not missing:
        return
    role = missing[0]
    raise NoAgentForRole(
        f"no agent for role{'s' if len(missing) > 1 else ''} {', '.join(missing)} in this "
        f"worker: set SUREHAND_AGENTS, e.g. {role}=demo (the built-in demo agent, for a "
        f"trial), {role}=command with SUREHAND_COMMAND_AGENT='your-program args' (runs it "
        f"for each TASK), or {role}=package.module:function (a Python handler); several "
        "roles: SUREHAND_AGENTS=DEV=demo,QA=command",
        roles=missing,
        setting="SUREHAND_AGENTS",
    )


POOLS = ("threads", "prefork", "solo")


def require_pool(pool: str) -> None:
    """Refuse a Celery pool sessions cannot run in. gevent and eventlet would need their
    monkey-patching before anything else is imported (Celery's own CLI does that for -P
    gevent; this command has imported the store, Redis and Celery by then): the worker would
    take messages whose sessions never run."""
    if pool not in POOLS:
        raise ConfigError(
            f"--pool {pool!r} cannot run sessions here; use threads (the default, the pool for "
            f"waiting sessions: one thread each, measured in docs/benchmarks.md), prefork or solo",
            setting="SUREHAND_POOL",
        )


@app.command()
@handle_errors
def worker(
    roles: Annotated[
        str, typer.Option(envvar="SUREHAND_ROLES", help="Comma list of recipient roles to serve.")
    ],
    concurrency: Annotated[
        int, typer.Option(envvar="SUREHAND_CONCURRENCY", min=1, help="Sessions at once.")
    ] = 4,
    pool: Annotated[
        str, typer.Option(envvar="SUREHAND_POOL", help="threads (default), prefork or solo.")
    ] = "threads",
    loglevel: LogLevel = "info",
    hostname: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_WORKER_NAME",
            help="Celery node name (default surehand-ROLES@host, as Flower lists it).",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    embedded: EmbeddedFlag = False,
) -> None:
    """Run a Celery worker that runs agent sessions for the given roles (and reconciles).

    Needs SUREHAND_BROKER_URL, SUREHAND_REDIS_URL and an agent for each role (SUREHAND_AGENTS);
    it refuses to start without them (--embedded: in-process stand-ins instead of the first two).
    """
    require_pool(pool)
    sh = open_surehand(database_url=database_url, redis_url=redis_url, broker_url=broker_url)
    require_services(sh.settings, "worker", embedded=embedded)
    logjson.install(sh.settings.log_format)
    role_list = [role.strip() for role in roles.split(",") if role.strip()]
    require_agents(sh, role_list)  # fail now, not at the first message, if a role has none
    announce_confinement(sh, role_list)  # and if agent programs cannot be confined as set
    wait_for_store(sh, "worker")
    announce_probes(sh)  # the reconciler's passes run in workers: admission asks these
    from celery.utils.nodenames import default_nodename, host_format

    from surehand.queue.celery_app import DEFAULT_QUEUE, configure_worker_queues

    queues = configure_worker_queues(sh.celery, role_list)
    names = [queue.name for queue in queues] + [DEFAULT_QUEUE]
    # Name workers after their roles (Flower lists them by name): surehand-DEV-QA@host.
    nodename = host_format(default_nodename(hostname or f"surehand-{'-'.join(role_list)}@%h"))
    celery_worker = sh.celery.Worker(
        concurrency=concurrency,
        pool=pool,
        loglevel=loglevel.upper(),
        hostname=nodename,
        queues=names,
        send_events=True,
        quiet=sh.settings.log_format == "json",  # no text banner between the JSON lines
        without_mingle=True,
        without_gossip=True,
    )
    celery_worker.start()
    raise typer.Exit(celery_worker.exitcode or 0)


@app.command()
@handle_errors
def beat(
    loglevel: LogLevel = "info",
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    embedded: EmbeddedFlag = False,
) -> None:
    """Run Celery beat: schedules the reconciler every SUREHAND_RECONCILE_INTERVAL_SECONDS.

    Run exactly one beat per deployment (a second one only duplicates harmless passes). Needs
    SUREHAND_BROKER_URL (--embedded: the in-process broker, which no worker sees). Its schedule
    file is SUREHAND_HOME/celerybeat-schedule.
    """
    sh = open_surehand(database_url=database_url, redis_url=redis_url, broker_url=broker_url)
    require_services(sh.settings, "beat", embedded=embedded)
    logjson.install(sh.settings.log_format)
    announce_probes(sh)
    # Beat's schedule file lives under SUREHAND_HOME, not in whatever directory it started in.
    sh.settings.home.mkdir(parents=True, exist_ok=True)
    schedule = str(sh.settings.home / "celerybeat-schedule")
    sh.celery.Beat(
        loglevel=loglevel.upper(),
        max_interval=1,
        schedule=schedule,
        quiet=sh.settings.log_format == "json",  # no text banner before the JSON lines
    ).run()


@app.command()
@handle_errors
def reconcile(
    once: Annotated[bool, typer.Option("--once", envvar="SUREHAND_ONCE", help="One pass.")] = True,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    embedded: EmbeddedFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Find lost sessions, open interruption cases and admit successors (one pass).

    Needs SUREHAND_REDIS_URL, the Redis whose leases say which sessions live (--embedded:
    in-process fakeredis, where no worker's lease is ever seen)."""
    sh = open_surehand(database_url=database_url, redis_url=redis_url)
    _ = sh.registry  # a bad SUREHAND_AGENTS / SUREHAND_PROBES entry is named first
    require_services(sh.settings, "reconcile", embedded=embedded)
    report = sh.reconcile()
    if as_json:
        emit_json(report.to_dict())
        return
    for key, value in report.to_dict().items():
        console.print(f"[bold]{key}[/] {value}")
