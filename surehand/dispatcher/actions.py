"""The service layer's actions with their after-commit effects, one function each.

Every door (Python, CLI, HTTP, MCP, console) calls these; none publishes, notifies or counts
on its own. An effect runs after the action's transaction committed and never undoes it: a
publish that fails is retried by the dispatcher sweep, a successor that was not published by
the next reconciler pass, and a hold notice is only a convenience for Flower.

The one effect that is not run here is the publish of a created TASK: it has one place,
:func:`surehand.dispatcher.submissions.write_task`, after the creating commit, because a
session's delegation creates TASKs through it too (without a door). :func:`write_task` here
only counts the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from surehand import metrics
from surehand.dispatcher import lifecycle, reviews, submissions, transitions
from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import after_done, publish_after_commit, publish_successor
from surehand.model import Action, Admission, InterruptionCase, Task, WriteTaskResult
from surehand.principals import Principal

if TYPE_CHECKING:  # recovery imports the lease store (redis); a process that only writes
    # TASKs (`surehand submit`, `tasks --json`) must not import it
    from surehand.dispatcher.recovery import Recovery, RecoveryOutcome


def write_task(
    services: Services, payload: Any, *, tenant: str, principal: Principal
) -> WriteTaskResult:
    """Create a TASK once per submission id and count the answer (``submissions.write_task``
    publishes a created TASK after its commit)."""
    result = submissions.write_task(services, payload, tenant=tenant, principal=principal)
    metrics.observe_submission(result.disposition.value)
    return result


def transition(
    services: Services, task_id: str, action: Action | str, *, tenant: str, **details: Any
) -> Task:
    """Move a TASK; one sent back for rework (reject, reopen) is published for a new attempt."""
    moved = transitions.transition(services, task_id, action, tenant=tenant, **details)
    if Action(action) in lifecycle.REWORK_ACTIONS and moved.cancel is None:  # parsed: valid
        publish_after_commit(services, task_id)
    after_done(services, moved)  # the dependants it released
    return moved


def recover(
    services: Services,
    recovery: Recovery,
    task_id: str,
    *,
    actor: str,
    tenant: str,
    principal: Principal,
) -> RecoveryOutcome:
    """Ask for a successor; publish it when admitted, tell operators when it is held."""
    outcome = recovery.recover(task_id, actor=actor, tenant=tenant, principal=principal)
    metrics.observe_admission(outcome.admission.value)
    if outcome.admission is Admission.REEXECUTE:
        publish_successor(services, task_id)
    elif outcome.case is not None and outcome.admission is Admission.HOLD_FOR_REVIEW:
        notify_held(services, [outcome.case])
    return outcome


def review(
    services: Services,
    recovery: Recovery,
    case_id: str,
    *,
    effect: Literal["present", "absent"] | None,
    operations: Mapping[int, Literal["present", "absent"]] | None,
    note: str,
    actor: str,
    tenant: str,
    principal: Principal,
) -> InterruptionCase:
    """An approver's answer on a held case; a successor it admits is published."""
    case = reviews.review(
        recovery.admitter,
        case_id,
        effect=effect,
        operations=operations,
        note=note,
        actor=actor,
        tenant=tenant,
        principal=principal,
    )
    if case.admission is not None:
        metrics.observe_admission(case.admission.value)
    if case.admission is Admission.REEXECUTE:
        publish_successor(services, case.task_id)
    return case


def raise_budget(
    services: Services,
    recovery: Recovery,
    task_id: str,
    *,
    budget_usd: float,
    note: str,
    actor: str,
    tenant: str,
    principal: Principal,
) -> tuple[Task, InterruptionCase | None]:
    """An approver raises a TASK's budget; a successor it then admits is published."""
    from surehand.dispatcher.budgets import raise_budget as raise_it

    task, case = raise_it(
        services,
        recovery,
        task_id,
        budget_usd=budget_usd,
        note=note,
        actor=actor,
        tenant=tenant,
        principal=principal,
    )
    if case is not None and case.admission is not None:
        metrics.observe_admission(case.admission.value)
    if case is not None and case.admission is Admission.REEXECUTE:
        publish_successor(services, case.task_id)
    return task, case


def notify_held(services: Services, cases: list[InterruptionCase]) -> None:
    """Hold notices for ``cases`` when the deployment has a broker (Flower shows them)."""
    if services.notify_hold is not None and cases:
        services.notify_hold(
            [
                {"task_id": c.task_id, "case_id": c.case_id, "attempt": c.interrupted_epoch}
                for c in cases
            ]
        )
