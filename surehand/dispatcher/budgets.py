"""An approver raises a TASK's budget (issue 32, item 3): recorded, then admission again.

A TASK held because its LLM agent spent its budget ("budget spent: $X of $Y") waits for its
approver. Raising the budget is a recorded decision (a ``budget_raised`` event with the
principal, the old and new amount and the note); if the TASK is held by an attempt that its
budget stopped, admission runs again on that case, and with money left it admits a successor
(a held open intent still holds it: raising a budget says nothing about an effect).
"""

from __future__ import annotations

from sqlalchemy import Connection

from surehand.call_requests import BudgetRequest, parse
from surehand.dispatcher.context import Services
from surehand.dispatcher.lifecycle import approvers
from surehand.dispatcher.recovery import Recovery
from surehand.errors import NotAuthorized, StaleDecision, TaskNotFound, ValidationFailed
from surehand.model import AttemptCause, EventKind, InterruptionCase, Task, usd_text
from surehand.principals import Principal, acting_for
from surehand.store import attempts, cases, events, task_moves, tasks
from surehand.store.task_columns import microusd


def raise_budget(
    services: Services,
    recovery: Recovery,
    task_id: str,
    *,
    budget_usd: float,
    note: str,
    actor: str,
    tenant: str | None,
    principal: Principal | None = None,
) -> tuple[Task, InterruptionCase | None]:
    """Record the new budget; re-admit the case of a hold its old budget caused (returned)."""
    request = parse(BudgetRequest, task_id=task_id, budget_usd=budget_usd, note=note, actor=actor)
    acting = acting_for(principal, request.actor, "actor")
    with services.store.transaction() as connection:
        task = tasks.get(connection, request.task_id, tenant=tenant)
        if task is None:
            raise TaskNotFound(f"no {request.task_id} here; `surehand tasks` lists them")
        _check(task, request)
        if not task_moves.update_if(
            connection,
            task.task_id,
            expect={"revision": task.revision},
            values={"budget_microusd": microusd(request.budget_usd)},
            now=services.clock.now(),
        ):
            raise StaleDecision(f"{task.task_id} changed meanwhile; raise its budget again")
        events.insert(
            connection,
            events.row(
                task_id=task.task_id,
                kind=EventKind.BUDGET_RAISED,
                by=request.actor,
                principal=acting.get("principal"),
                at=services.clock.now(),
                reason=request.note,
                data={"from_usd": task.budget_usd, "to_usd": request.budget_usd, **acting},
            ),
        )
        held = _budget_hold(connection, task)
    decided = None
    if held is not None:
        decided = recovery.admitter.admit(
            held.case_id, decided_by=request.actor, principal=acting.get("principal")
        )
    with services.store.snapshot() as connection:
        raised = tasks.get(connection, task.task_id)
    assert raised is not None
    return raised, decided


def _check(task: Task, request: BudgetRequest) -> None:
    if request.actor not in approvers(task):
        raise NotAuthorized(
            f"{request.actor} may not raise the budget of {task.task_id}; only its approvers "
            f"({', '.join(sorted(approvers(task)))}) may",
            actor=request.actor,
        )
    if task.budget_usd is not None and request.budget_usd <= task.budget_usd:
        raise ValidationFailed(
            "budget_usd", f"must be above the current budget (${usd_text(task.budget_usd)})"
        )


def _budget_hold(connection: Connection, task: Task) -> InterruptionCase | None:
    """The case holding ``task`` if its attempt ended because the budget was spent."""
    if task.hold is None:
        return None
    case = cases.get(connection, task.hold.case_id)
    if case is None:
        return None
    attempt = attempts.get(connection, case.interrupted_attempt_id)
    if attempt is None or attempt.cause is not AttemptCause.BUDGET_SPENT:
        return None
    return case
