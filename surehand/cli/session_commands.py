"""``surehand worker | beat | reconcile | recover | review | cases | effect | delegate``."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, cast

import typer

from surehand import logjson
from surehand.cli.app import app
from surehand.cli.common import (
    DatabaseUrl,
    EmbeddedFlag,
    JsonFlag,
    Tenant,
    console,
    emit_json,
    err_console,
    handle_errors,
    open_existing,
    require_services,
    wait_for_store,
)
from surehand.errors import ConfigError, NoAgentForRole, OperationFailed

if TYPE_CHECKING:  # the rest is imported by the commands that use it (CLI start-up time)
    from surehand.agents.command import CommandAgent
    from surehand.call_requests import Effect
    from surehand.facade import Surehand
    from surehand.model import InterruptionCase

RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", envvar="SUREHAND_REDIS_URL", help="Redis for leases.")
]
BrokerUrl = Annotated[
    str | None, typer.Option("--broker-url", envvar="SUREHAND_BROKER_URL", help="Celery broker.")
]
Approver = Annotated[str, typer.Option(envvar="SUREHAND_ACTOR", help="PM or ADMIN.")]
LogLevel = Annotated[
    str, typer.Option(envvar="SUREHAND_LOGLEVEL", help="Celery log level: debug|info|warning.")
]


def _open(
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
    sh = _open(database_url=database_url, redis_url=redis_url, broker_url=broker_url)
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
    sh = _open(database_url=database_url, redis_url=redis_url, broker_url=broker_url)
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
    sh = _open(database_url=database_url, redis_url=redis_url)
    _ = sh.registry  # a bad SUREHAND_AGENTS / SUREHAND_PROBES entry is named first
    require_services(sh.settings, "reconcile", embedded=embedded)
    report = sh.reconcile()
    if as_json:
        emit_json(report.to_dict())
        return
    for key, value in report.to_dict().items():
        console.print(f"[bold]{key}[/] {value}")


@app.command()
@handle_errors
def recover(
    task_id: Annotated[str, typer.Argument(help="TASK id.")],
    actor: Annotated[str, typer.Option(envvar="SUREHAND_ACTOR", help="Requesting role.")],
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Ask for a successor of an interrupted TASK; admission decides from recorded evidence."""
    sh = _open(database_url=database_url, redis_url=redis_url, broker_url=broker_url, tenant=tenant)
    outcome = sh.recover(task_id, actor=actor)
    if as_json:
        emit_json(outcome.to_dict())
        return
    console.print(f"[bold]{outcome.admission.value}[/]: {outcome.reason}")
    if outcome.case is not None:
        _print_case(outcome.case)


def _print_case(case: InterruptionCase) -> None:
    from surehand.cli.render import cases_table

    console.print(cases_table([case]))


@app.command()
@handle_errors
def review(
    case_id: Annotated[str, typer.Argument(help="Interruption case id.")],
    effect: Annotated[
        str, typer.Option(envvar="SUREHAND_EFFECT", help="present or absent: what you verified.")
    ],
    note: Annotated[str, typer.Option(envvar="SUREHAND_NOTE", help="How you checked it.")],
    actor: Approver,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Release a held TASK by stating whether its interrupted effect happened."""
    # Checked by the service layer like every door's (ValidationFailed naming effect: exit 5).
    verdict = cast("Effect", effect)
    sh = _open(database_url=database_url, redis_url=redis_url, broker_url=broker_url, tenant=tenant)
    case = sh.review(case_id, effect=verdict, note=note, actor=actor)
    if as_json:
        emit_json(case.to_dict())
    else:
        _print_case(case)


@app.command()
@handle_errors
def budget(
    task_id: Annotated[str, typer.Argument(help="TASK id.")],
    usd: Annotated[
        float, typer.Option(envvar="SUREHAND_BUDGET_USD", help="The new budget in USD.")
    ],
    note: Annotated[str, typer.Option(envvar="SUREHAND_NOTE", help="Why it is raised.")],
    actor: Approver,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Raise what a TASK's LLM agent may spend (recorded); one its budget held runs again."""
    sh = _open(database_url=database_url, redis_url=redis_url, broker_url=broker_url, tenant=tenant)
    task, case = sh.raise_budget(task_id, budget_usd=usd, note=note, actor=actor)
    if as_json:
        emit_json({"task": task.to_dict(), "case": case.to_dict() if case else None})
        return
    console.print(f"{task.task_id}: budget ${task.budget_usd:.2f}")
    if case is not None:
        _print_case(case)


@app.command()
@handle_errors
def cases(
    state: Annotated[
        str | None, typer.Option(envvar="SUREHAND_CASE_STATE", help="open|resolved")
    ] = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """List interruption cases (newest first)."""
    found = open_existing(database_url, tenant).cases(state=state)
    if as_json:
        emit_json([case.to_dict() for case in found])
    else:
        from surehand.cli.render import cases_table

        console.print(cases_table(found))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def effect(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(envvar="SUREHAND_EFFECT_NAME", help="Operation name.")],
    key: Annotated[
        str | None, typer.Option(envvar="SUREHAND_EFFECT_KEY", help="Idempotency key.")
    ] = None,
    policy: Annotated[
        str, typer.Option(envvar="SUREHAND_RETRY_POLICY", help="none or keyed.")
    ] = "none",
    probe: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_PROBE",
            help="Probe that can tell later whether CMD's effect happened: a built-in one "
            "(git.push, http.request, github.pull_request) or one of SUREHAND_PROBES.",
        ),
    ] = None,
    probe_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--probe-arg",
            envvar="SUREHAND_PROBE_ARGS",
            help="NAME=VALUE argument of the probe, repeated (git.push: remote=URL, ref=REF, "
            "commit=SHA).",
        ),
    ] = None,
) -> None:
    """Run `-- CMD...` as a declared side effect of the current session (command agents).

    Talks to the session MCP server with the session's own token (SUREHAND_MCP_URL and
    SUREHAND_MCP_TOKEN, set by the command agent); it needs no store. The intent is recorded
    before CMD runs and the outcome after; a CMD already recorded as succeeded for this TASK is
    not run again (its recorded output is printed).
    """
    argv = list(ctx.args)
    if not argv:
        raise typer.BadParameter("give the command after --, e.g. surehand effect --name x -- cmd")
    from surehand.agents.session_client import run_effect

    try:
        outcome = run_effect(
            argv,
            name=name,
            key=key,
            policy=policy,
            probe=probe,
            probe_args=_probe_args(probe_arg or []),
        )
    except OperationFailed as failed:
        console.print(f"[red]effect failed[/]: {failed.message}", style="red")
        raise typer.Exit(1) from None
    sys.stdout.write(str(outcome.get("stdout", "")))


def _probe_args(items: list[str]) -> dict[str, str] | None:
    """``--probe-arg NAME=VALUE`` options as the probe's arguments (None for none)."""
    found: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise typer.BadParameter(f"{item!r}: write it as NAME=VALUE", param_hint="--probe-arg")
        if name.strip() in found:
            raise typer.BadParameter(f"{name!r} is given twice", param_hint="--probe-arg")
        found[name.strip()] = value
    return found or None


@app.command()
@handle_errors
def delegate(
    recipient: Annotated[
        str, typer.Option("--to", envvar="SUREHAND_DELEGATE_TO", help="Role that does it: QA.")
    ],
    subject: Annotated[
        str, typer.Option(envvar="SUREHAND_DELEGATE_SUBJECT", help="The child TASK's subject.")
    ],
    body: Annotated[
        str, typer.Option(envvar="SUREHAND_DELEGATE_BODY", help="What to do (Markdown).")
    ] = "",
    key: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_DELEGATE_KEY",
            help="Name of this child (dev, qa-1): the same key from any attempt finds it again.",
        ),
    ] = None,
    depends_on: Annotated[
        list[str] | None,
        typer.Option(
            "--depends-on",
            envvar="SUREHAND_DELEGATE_DEPENDS_ON",
            help="task_id of a sibling that must be done first (repeatable).",
        ),
    ] = None,
    priority: Annotated[
        str, typer.Option(envvar="SUREHAND_DELEGATE_PRIORITY", help="P0, P1, P2 or P3.")
    ] = "P2",
) -> None:
    """Create a child TASK of the current session's TASK, once (command agents).

    Talks to the session MCP server with the session's own token (SUREHAND_MCP_URL and
    SUREHAND_MCP_TOKEN), like surehand effect. Prints the result as JSON: disposition created,
    reused (an earlier attempt created it: the same task_id) or conflict (the key names another
    request).
    """
    from surehand.agents.session_client import call_tool, session_grant

    url, token = session_grant()
    arguments = {
        "recipient": recipient,
        "subject": subject,
        "body": body,
        "key": key,
        "depends_on": list(depends_on or []),
        "priority": priority,
    }
    emit_json(call_tool(url, token, "delegate", arguments))
