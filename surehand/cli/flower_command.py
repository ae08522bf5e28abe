"""``surehand flower``: Flower on surehand's Celery app, run in a child environment of its
own, and the credentials it needs off a loopback address."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from surehand.cli.app import app
from surehand.cli.common import handle_errors
from surehand.cli.serve_commands import BrokerUrl, command_settings
from surehand.errors import ConfigError


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def flower(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(envvar="SUREHAND_FLOWER_HOST", help="Address [127.0.0.1].")
    ] = None,
    port: Annotated[
        int | None, typer.Option(envvar="SUREHAND_FLOWER_PORT", help="Port [5555].")
    ] = None,
    broker_url: BrokerUrl = None,
) -> None:
    """Run Flower on surehand's Celery app: sessions show as surehand.run_session(TASK id).

    Extra arguments go to Flower (e.g. --basic-auth=user:pass); its FLOWER_* variables apply.
    Flower runs in / with surehand's settings and FLOWER_* only (no API token), so nothing in
    this directory is imported or executed: give files (--conf, --certfile) as absolute paths.
    On a loopback address its web UI and HTTP API (/api/tasks) answer without credentials
    (FLOWER_UNAUTHENTICATED_API=true unless set); on any other address it refuses to start
    without --basic-auth=user:password or FLOWER_BASIC_AUTH (or Flower's --auth).
    """
    settings = command_settings(broker_url=broker_url)
    if not settings.broker_url or settings.broker_url.startswith("memory"):
        raise ConfigError(
            "Flower watches a shared broker: set SUREHAND_BROKER_URL (an in-process memory "
            "broker cannot be watched from another process)",
            setting="SUREHAND_BROKER_URL",
        )
    bind_host = host or settings.flower_host
    _flower_auth(bind_host, ctx.args)
    os.environ["SUREHAND_BROKER_URL"] = settings.broker_url
    os.environ["SUREHAND_HOME"] = str(settings.home.resolve())
    from surehand import children  # isolated: not this directory's modules, nor API tokens

    # Celery imports the -A module with the working directory on sys.path, and Flower executes
    # ./flowerconfig.py if there is one: it runs in / (files it is given: absolute paths).
    os.chdir("/")
    argv = children.python_module(
        "celery",
        "-A",
        "surehand.celery_entry",
        "flower",
        f"--address={bind_host}",
        f"--port={settings.flower_port if port is None else port}",
        *ctx.args,
    )
    os.execve(sys.executable, argv, children.environment(prefixes=("FLOWER_",)))


_FLOWER_AUTH_OPTIONS = ("--basic-auth", "--basic_auth", "--auth")
_FLOWER_AUTH_VARIABLES = ("FLOWER_BASIC_AUTH", "FLOWER_AUTH")


def _flower_auth(host: str, args: list[str]) -> None:
    """Loopback without credentials: Flower's API open to this machine (Flower 2 answers 401
    otherwise). Elsewhere: credentials required, since Flower can revoke and terminate tasks."""
    from surehand.doors.auth import is_loopback

    given = any(arg.split("=")[0] in _FLOWER_AUTH_OPTIONS for arg in args) or any(
        os.environ.get(name) for name in _FLOWER_AUTH_VARIABLES
    )
    if given:
        return
    if is_loopback(host):
        os.environ.setdefault("FLOWER_UNAUTHENTICATED_API", "true")
        return
    raise ConfigError(
        f"refusing to start Flower on {host} without credentials: anyone who can reach it "
        "could read every session and revoke or terminate tasks. Pass "
        "--basic-auth=user:password or set FLOWER_BASIC_AUTH=user:password (or bind "
        "127.0.0.1)",
        setting="FLOWER_BASIC_AUTH",
    )
