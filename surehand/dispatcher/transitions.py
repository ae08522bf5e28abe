"""The public move a person or operator tool makes on a TASK (``transition``).

Apart from :mod:`surehand.dispatcher.lifecycle` (the edges, their rules and ``apply``) because
a move that sends a cancelled TASK back for rework ends it through
:mod:`surehand.dispatcher.cancel`, which itself moves TASKs through the lifecycle: this module
sits above both, so neither imports the other back.
"""

from __future__ import annotations

from surehand.call_requests import TransitionRequest, parse
from surehand.dispatcher.cancel import archive_cancelled
from surehand.dispatcher.context import Services
from surehand.dispatcher.lifecycle import REWORK_ACTIONS, Move, apply
from surehand.errors import NotAuthorized, TaskNotFound, ValidationFailed
from surehand.model import SYSTEM, Action, Task
from surehand.principals import Principal, acting_for
from surehand.requests import validate_tenant
from surehand.store import tasks


def transition(
    services: Services,
    task_id: str,
    action: Action | str,
    *,
    actor: str,
    tenant: str | None,
    reason: str | None = None,
    report_id: str | None = None,
    principal: Principal | None = None,
) -> Task:
    """The public move: validate every argument, hold ``actor`` to ``principal`` (only an
    ADMIN acts for another role, and that is recorded), lock the TASK, apply the move, commit.

    ``principal`` None is an in-process caller trusted as any role (tests, operator tools).
    """
    _refuse_system(actor)
    if str(action) == Action.CANCEL.value:
        raise ValidationFailed(
            "action", "a TASK is cancelled with cancel (its session is stopped), not a move"
        )
    request = parse(
        TransitionRequest,
        task_id=task_id,
        action=action,
        actor=actor,
        reason=reason,
        report_id=report_id,
    )
    acting = acting_for(principal, request.actor, "actor")
    scope = validate_tenant(tenant) if tenant is not None else None
    with services.store.transaction() as connection:
        task = tasks.get_for_update(connection, request.task_id)
        if task is None or (scope is not None and task.tenant != scope):
            raise TaskNotFound(
                f"no {request.task_id} in tenant {scope!r}; `surehand tasks` lists them"
            )
        move = Move(
            request.action,
            by=request.actor,
            now=services.clock.now(),
            reason=request.reason,
            report_id=request.report_id,
            acting=acting,
        )
        moved = apply(connection, task, move)
        if moved.cancel is not None and request.action in REWORK_ACTIONS:
            # Cancelled while its session ran, which settled before its stop watch looked:
            # sent back, it would wait in active for a claim that refuses it. It ends now.
            return archive_cancelled(connection, services, moved)
        return moved


def _refuse_system(actor: object) -> None:
    """An external actor is never the runtime itself."""
    if actor == SYSTEM:
        raise NotAuthorized(
            f"{SYSTEM} is the runtime's own actor; act under your role instead", actor=actor
        )
