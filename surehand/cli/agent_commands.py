"""``surehand effect | delegate``: what a command agent's program runs inside its session,
through the session MCP server with the session's own token (it needs no store)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from surehand.cli.app import app
from surehand.cli.common import console, emit_json, handle_errors
from surehand.errors import OperationFailed


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
