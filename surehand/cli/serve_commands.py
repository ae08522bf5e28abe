"""``surehand up | api | mcp``: the long-running front doors."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from surehand import logjson
from surehand.cli.app import app
from surehand.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    DatabaseUrl,
    EmbeddedFlag,
    JsonFlag,
    Tenant,
    console,
    emit_event,
    err_console,
    handle_errors,
    invoked_as,
    require_services,
    wait_for_store,
)
from surehand.cli.session_commands import announce_confinement
from surehand.errors import ConfigError

if TYPE_CHECKING:  # imported by the commands that use them: `surehand --help` and the other
    # commands do not pay for the runtime (tests/doors/test_cli_startup.py)
    from surehand.agents.command import CommandAgent
    from surehand.config import Settings
    from surehand.embedded import Embedded, Progress

Host = Annotated[
    str | None,
    typer.Option("--host", envvar="SUREHAND_API_HOST", help="Address to bind (default 127.0.0.1)."),
]
Port = Annotated[
    int | None, typer.Option("--port", envvar="SUREHAND_API_PORT", help="Port (default 8000).")
]
RedisUrl = Annotated[
    str | None, typer.Option("--redis-url", envvar="SUREHAND_REDIS_URL", help="Redis for leases.")
]
BrokerUrl = Annotated[
    str | None, typer.Option("--broker-url", envvar="SUREHAND_BROKER_URL", help="Celery broker.")
]
LogLevel = Annotated[str, typer.Option(envvar="SUREHAND_LOGLEVEL", help="debug|info|warning.")]


def command_settings(**overrides: object) -> Settings:
    """Settings from the environment with the command line's explicit values on top."""
    from surehand.config import Settings

    return Settings().model_copy(update={k: v for k, v in overrides.items() if v is not None})


@app.command()
@handle_errors
def up(
    home: Annotated[
        Path | None, typer.Option(envvar="SUREHAND_HOME", help="Directory of the SQLite file.")
    ] = None,
    host: Host = None,
    port: Port = None,
    concurrency: Annotated[
        int | None,
        typer.Option(envvar="SUREHAND_UP_CONCURRENCY", min=1, help="Sessions at once [4]."),
    ] = None,
    api: Annotated[
        bool, typer.Option("--api/--no-api", envvar="SUREHAND_UP_API", help="Serve HTTP.")
    ] = True,
    demo: Annotated[
        bool,
        typer.Option(
            envvar="SUREHAND_UP_DEMO",
            help="Submit a demo TASK, follow it to its REPORT, then stop (exit 0 on success).",
        ),
    ] = False,
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    as_json: JsonFlag = False,
) -> None:
    """Run API, worker, reconciler and dispatcher in one process (no services needed).

    Defaults: SQLite under ./.surehand, in-process queue and leases, the demo agent for DEV,
    QA and OPS unless SUREHAND_AGENTS is set. Ctrl-C stops it cleanly (running sessions
    finish first; a second Ctrl-C exits at once). With --demo it stops after the demo.
    """
    from surehand.cli.demo import run_demo
    from surehand.embedded import Embedded

    settings = command_settings(
        home=home, database_url=database_url, redis_url=redis_url, broker_url=broker_url
    )
    embedded = Embedded(
        settings,
        host=host or settings.api_host,
        port=settings.api_port if port is None else port,
        concurrency=concurrency or settings.up_concurrency,
        with_api=api,
    )
    commands = announce_confinement(embedded.sh, embedded.roles)
    if api:
        refuse_agents_at_an_open_api(settings, commands)
    stop = threading.Event()
    _trap_signals(stop)
    embedded.start()
    _announce(embedded, as_json=as_json, hints=not demo)
    code = EXIT_OK
    if demo:
        code = EXIT_OK if run_demo(embedded.sh, stop, as_json=as_json) else EXIT_ERROR
        stop.set()
    while not stop.wait(0.25):
        if not embedded.healthy():
            err_console.print("[red]a part of `surehand up` stopped unexpectedly; exiting[/]")
            code = EXIT_ERROR
            break
    embedded.stop(progress=_stopping(as_json))
    if as_json:
        emit_event({"event": "stopped", "exit_code": code})
    else:
        err_console.print("stopped cleanly")
    raise typer.Exit(code)


def refuse_agents_at_an_open_api(settings: Settings, commands: list[CommandAgent]) -> None:
    """ConfigError if command agents share the network of a token-less API: every caller on
    loopback is its local ADMIN, so an agent could review any held TASK (issue 29)."""
    from surehand.doors.auth import Authenticator

    if not commands or not Authenticator(settings).open:
        return
    network = commands[0].confinement.net
    if network.shares_host:
        raise ConfigError(
            "surehand up serves a token-less API on loopback, and its command agents share "
            f"this host's network ({network.describe()}): an agent would act there as the "
            "local ADMIN. Set SUREHAND_API_TOKENS, let agents run in a network of their own "
            "(SUREHAND_AGENT_NETWORK=egress, the default, with bubblewrap), or start it with "
            "--no-api",
            setting="SUREHAND_AGENT_NETWORK",
        )


def _missing_extra(extra: str, error: ImportError) -> ConfigError:
    return ConfigError(
        f"this command needs the {extra} extra: pip install 'surehand[{extra}]' "
        f"({error.name or error} is not installed)"
    )


def _stopping(as_json: bool) -> Progress:
    """Say which sessions a shutdown waits for, and that a second Ctrl-C stops at once."""
    said: list[int] = []

    def progress(running: list[str], waited_s: float) -> None:
        ids = ", ".join(running)
        if as_json and not (running or said):
            return  # nothing to wait for: the stream goes on with "stopped"
        if as_json:
            emit_event({"event": "stopping", "running": running, "waited_s": round(waited_s, 1)})
        elif not said:
            what = f"waiting for {len(running)} running session(s) ({ids})" if running else ""
            hint = "; press Ctrl-C again to stop now" if running else ""
            err_console.print(f"stopping: {what or 'no session running'}{hint}", soft_wrap=True)
        elif running:
            err_console.print(
                f"  still waiting for {len(running)} ({ids}) after {waited_s:.0f} s; "
                "Ctrl-C again stops now",
                soft_wrap=True,
            )
        else:
            err_console.print("  every running session finished")
        said.append(len(running))

    return progress


def _trap_signals(stop: threading.Event) -> None:
    from surehand.agents import groups  # now: a signal handler must not import

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            # A second Ctrl-C: leave now. Sessions cut off here are found lost by the next
            # run's reconciler and recovered from their recorded effects. Their command agents
            # die first (their trampolines would also see this process go).
            groups.kill_all()
            os._exit(EXIT_INTERRUPTED)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def _announce(embedded: Embedded, *, as_json: bool, hints: bool) -> None:
    from surehand.store import describe_url

    settings = embedded.settings
    store = embedded.sh.store.describe()
    agents = "demo agent" if embedded.demo_agents else "SUREHAND_AGENTS"
    # The URLs' passwords stay out of the terminal and its logs, as the store's does.
    broker = describe_url(settings.broker_url) if settings.broker_url else settings.broker_url
    leases = describe_url(settings.redis_url) if settings.redis_url else "in-process (fakeredis)"
    if as_json:
        emit_event(
            {
                "event": "ready",
                "api": embedded.api_url,
                "console": f"{embedded.api_url}/ui/" if embedded.api_url else None,
                "database": store,
                "roles": embedded.roles,
                "probes": embedded.sh.registry.probe_names(),
                "broker": broker,
                "leases": leases,
            }
        )
        sys.stdout.flush()
        return
    from surehand.config.store import DEFAULT_HOME

    custom_home = not settings.database_url and settings.home != DEFAULT_HOME
    home = f"SUREHAND_HOME={settings.home} " if custom_home else ""
    home += invoked_as()
    console.print("[bold green]surehand up[/]: everything in one process (Ctrl-C to stop)")
    console.print(f"  store       {store}")
    if embedded.api_url:
        console.print(f"  HTTP API    {embedded.api_url}   (OpenAPI: {embedded.api_url}/docs)")
        console.print(f"  console     {embedded.api_url}/ui/   (sign in with an API token)")
    console.print(f"  worker      roles {', '.join(embedded.roles)} ({agents})")
    console.print(f"  leases      {leases}")
    console.print(f"  probes      {', '.join(embedded.sh.registry.probe_names()) or 'none'}")
    if not hints:
        return
    console.print("Submit from another terminal in this directory:")
    console.print(
        f'  {home} submit --sender PM --recipient DEV --subject "Say hello" --id my-first-task',
        soft_wrap=True,
    )
    console.print(f"  {home} tasks --watch", soft_wrap=True)


@app.command()
@handle_errors
def api(
    host: Host = None,
    port: Port = None,
    loglevel: LogLevel = "info",
    database_url: DatabaseUrl = None,
    redis_url: RedisUrl = None,
    broker_url: BrokerUrl = None,
    embedded: EmbeddedFlag = False,
) -> None:
    """Serve the HTTP API (OpenAPI at /docs). Binds 127.0.0.1 unless --host says otherwise.

    Without SUREHAND_API_TOKENS every caller is a local ADMIN, so a non-loopback --host then
    refuses to start. Needs SUREHAND_BROKER_URL (to publish created TASKs) and
    SUREHAND_REDIS_URL (leases, for recover and review); --embedded runs without them (TASKs
    wait for a `surehand up` sweep).
    """
    try:
        from surehand.api import create_app
        from surehand.doors.serving import serve
    except ImportError as exc:
        raise _missing_extra("api", exc) from None
    from surehand.doors.auth import Authenticator

    settings = command_settings(
        database_url=database_url, redis_url=redis_url, broker_url=broker_url
    )
    bind_host = host or settings.api_host
    Authenticator(settings).check_start(bind_host, "the API")
    require_services(settings, "api", embedded=embedded)
    logjson.install(settings.log_format)
    bind_port = settings.api_port if port is None else port
    from surehand.facade import Surehand

    sh = Surehand(settings=settings)
    wait_for_store(sh, "api")
    # Recover and review requests run admission in this process: it needs the probes too.
    from surehand.cli.session_commands import announce_probes  # (keeps `up` first in --help)

    announce_probes(sh)
    serve(
        create_app(sh),
        bind_host,
        bind_port,
        log_level=loglevel,
        announce=_api_listening,
        forwarded_allow_ips=settings.api_forwarded_allow_ips,
    )


def _api_listening(url: str) -> None:
    """Said once the socket listens (a taken port fails first, naming SUREHAND_API_PORT)."""
    err_console.print(f"surehand API on {url} (OpenAPI at {url}/docs)", soft_wrap=True)
    err_console.print(f"review console on {url}/ui/", soft_wrap=True)


@app.command()
@handle_errors
def mcp(
    transport: Annotated[
        str | None,
        typer.Option(envvar="SUREHAND_MCP_TRANSPORT", help="stdio (default) or http."),
    ] = None,
    host: Annotated[
        str | None, typer.Option(envvar="SUREHAND_MCP_HOST", help="HTTP address [127.0.0.1].")
    ] = None,
    port: Annotated[
        int | None, typer.Option(envvar="SUREHAND_MCP_PORT", help="HTTP port [8001].")
    ] = None,
    database_url: DatabaseUrl = None,
    broker_url: BrokerUrl = None,
    tenant: Tenant = None,
) -> None:
    """Serve the MCP tools (write_task, write_report, read_task, list_tasks, task_status).

    Agent hosts spawn it over stdio: `claude mcp add surehand -- surehand mcp`.
    """
    try:
        from surehand.mcp.transport import run_http, run_stdio
    except ImportError as exc:
        raise _missing_extra("mcp", exc) from None

    settings = command_settings(database_url=database_url, broker_url=broker_url, tenant=tenant)
    chosen = transport or settings.mcp_transport
    from surehand.facade import Surehand

    sh = Surehand(settings=settings)
    if chosen == "stdio":
        run_stdio(sh)
    elif chosen == "http":
        run_http(host or settings.mcp_host, settings.mcp_port if port is None else port, sh)
    else:
        raise ConfigError(f"--transport must be stdio or http, not {chosen!r}")
