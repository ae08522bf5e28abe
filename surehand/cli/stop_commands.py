"""``surehand cancel | release | pause | resume``: stop a TASK, release one held by a dead
dependency, hold a role's sessions back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from surehand.cli.app import app
from surehand.cli.common import DatabaseUrl, JsonFlag, Tenant, console, emit_json, handle_errors

if TYPE_CHECKING:
    from surehand.facade import Surehand

Actor = Annotated[
    str | None,
    typer.Option(
        envvar="SUREHAND_ACTOR", help="Acting role (default: this CLI's principal, ADMIN)."
    ),
]


def _open(database_url: str | None, tenant: str | None) -> Surehand:
    from surehand.facade import Surehand

    return Surehand(database_url=database_url, tenant=tenant)


@app.command()
@handle_errors
def cancel(
    task_id: Annotated[str, typer.Argument(help="TASK id.")],
    reason: Annotated[
        str, typer.Option(envvar="SUREHAND_REASON", help="Why (required, recorded).")
    ],
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Cancel a TASK: in inbox it is never claimed; a running session is stopped within
    seconds (its attempt ends cancelled); a held TASK keeps its hold for its approver."""
    outcome = _open(database_url, tenant).cancel(task_id, reason=reason, actor=actor)
    if as_json:
        emit_json(outcome.to_dict())
        return
    again = " (asked before: nothing changed)" if outcome.repeated else ""
    console.print(f"{task_id}: [bold]{outcome.outcome}[/] - {outcome.detail}{again}")


@app.command()
@handle_errors
def release(
    task_id: Annotated[str, typer.Argument(help="TASK id.")],
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a TASK held by an archived or cancelled dependency anyway (its approver): the dead
    dependency is dropped; it is dispatched once its other dependencies are done. To drop the
    TASK instead, cancel it."""
    task = _open(database_url, tenant).release_hold(task_id, actor=actor)
    if as_json:
        emit_json(task.to_dict())
        return
    console.print(f"{task_id}: [bold]released[/] - it runs once its other dependencies are done")


@app.command()
@handle_errors
def pause(
    role: Annotated[str, typer.Argument(help="Role code, e.g. DEV.")],
    reason: Annotated[str, typer.Option(envvar="SUREHAND_REASON", help="Why (recorded).")] = "",
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Pause a role: no session of it starts until `surehand resume`; running ones go on."""
    paused = _open(database_url, tenant).pause_role(role, reason=reason, actor=actor)
    if as_json:
        emit_json(paused.to_dict())
        return
    console.print(f"{paused.role} paused by {paused.paused_by} at {paused.paused_at:%H:%M:%S}")


@app.command()
@handle_errors
def resume(
    role: Annotated[str, typer.Argument(help="Role code, e.g. DEV.")],
    actor: Actor = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Resume a paused role and publish its TASKs that waited."""
    waiting = _open(database_url, tenant).resume_role(role, actor=actor)
    if as_json:
        emit_json({"role": role, "resumed": True, "waiting": waiting})
        return
    console.print(f"{role} resumed; {waiting} TASK(s) waiting in inbox published again")
