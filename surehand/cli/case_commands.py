"""``surehand recover | review | budget | cases``: an interrupted or held TASK's cases, as its
approver handles them (a successor asked for, an effect reviewed, a budget raised)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

import typer

from surehand.cli.app import app
from surehand.cli.common import (
    DatabaseUrl,
    JsonFlag,
    Tenant,
    console,
    emit_json,
    handle_errors,
    open_existing,
)
from surehand.cli.session_commands import BrokerUrl, RedisUrl, open_surehand

if TYPE_CHECKING:  # the rest is imported by the commands that use it (CLI start-up time)
    from surehand.call_requests import Effect
    from surehand.model import InterruptionCase

Approver = Annotated[str, typer.Option(envvar="SUREHAND_ACTOR", help="PM or ADMIN.")]


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
    sh = open_surehand(
        database_url=database_url, redis_url=redis_url, broker_url=broker_url, tenant=tenant
    )
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
    sh = open_surehand(
        database_url=database_url, redis_url=redis_url, broker_url=broker_url, tenant=tenant
    )
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
    sh = open_surehand(
        database_url=database_url, redis_url=redis_url, broker_url=broker_url, tenant=tenant
    )
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
