"""Reviews: an approver's ruling on a held case (the effect is ``present`` or ``absent``, for
every unsettled operation of the interrupted attempt or for each by its id), recorded on the
case and its operations, after which admission runs again.

*Review* here is not the ``review`` bucket, where a returned TASK waits for approve or reject
(:mod:`surehand.dispatcher.lifecycle`), nor a session's choice to settle there
(``Session.settle(to_review=...)``). Only the TASK's approvers may review (NotAuthorized
otherwise, with nothing written).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from surehand.call_requests import Effect, ReviewRequest, parse
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import unsettled
from surehand.dispatcher.lifecycle import approvers
from surehand.errors import CaseNotFound, NotAuthorized, RecoveryError, ValidationFailed
from surehand.model import Admission, CaseState, EventKind, InterruptionCase, Operation, Task
from surehand.principals import Principal, acting_for
from surehand.store import cases, events, operations, tasks

if TYPE_CHECKING:  # admission imports the lease store (redis); the doors that import this
    # module through actions (`surehand tasks`, `show`, `submit`) must not pay for it
    from surehand.dispatcher.admission import Admitter


def review(
    admitter: Admitter,
    case_id: str,
    *,
    effect: Effect | None,
    note: str,
    actor: str,
    tenant: str | None,
    principal: Principal | None = None,
    operations: Mapping[int, Effect] | None = None,
) -> InterruptionCase:
    """An approver states whether a held case's effects happened; admission runs again.

    ``effect`` (``"present"`` or ``"absent"``) answers every unsettled operation of the
    interrupted attempt, or ``operations`` answers each by its id (``effect`` then those
    not listed); ``note`` says how it was checked. ValidationFailed otherwise, and for an
    unsettled operation left unanswered; a refused review writes nothing.
    """
    request = parse(
        ReviewRequest,
        case_id=case_id,
        effect=effect,
        operations=dict(operations or {}),
        note=note,
        actor=actor,
    )
    acting = acting_for(principal, request.actor, "actor")
    case, task = _held_case(admitter.services, request.case_id, tenant)
    check_approver(task, request.actor, f"review {request.case_id}")
    _record_review(admitter.services, case, task, request, acting)
    name = acting.get("principal")
    return admitter.admit(
        request.case_id, decided_by=request.actor, principal=str(name) if name else None
    )


def _held_case(
    services: Services, case_id: str, tenant: str | None
) -> tuple[InterruptionCase, Task]:
    with services.store.snapshot() as connection:
        case = cases.get(connection, case_id)
        task = tasks.get(connection, case.task_id, tenant=tenant) if case else None
    if case is None or task is None:
        raise CaseNotFound(f"no interruption case {case_id}; `surehand cases` lists them")
    if case.state is not CaseState.OPEN or case.admission is not Admission.HOLD_FOR_REVIEW:
        raise RecoveryError(
            f"case {case_id} is not held for review (admission "
            f"{case.admission.value if case.admission else 'pending'}, {case.state.value})"
        )
    return case, task


def _record_review(
    services: Services,
    case: InterruptionCase,
    task: Task,
    request: ReviewRequest,
    acting: dict[str, object],
) -> None:
    note, actor = request.note, request.actor
    now = services.clock.now()
    with services.store.transaction() as connection:
        ops = operations.for_attempt(connection, case.interrupted_attempt_id)
        answers = _answers(request, ops)
        effect = _overall(request.effect, answers)
        review: dict[str, Any] = {"effect": effect, "note": note, "by": actor}
        review.update(at=now.isoformat(), **_by(acting))
        if request.operations:
            review["operations"] = {str(op_id): said for op_id, said in answers.items()}
        cases.set_review(connection, case.case_id, review)
        # The reviewed fact becomes the record of every unsettled operation of the
        # interrupted attempt (open, or raised with an unknown effect), so a later session
        # of this TASK neither repeats a present effect nor refuses an absent one.
        for op_id, said in answers.items():
            operations.confirm(
                connection,
                op_id,
                present=said == "present",
                source={"source": f"review:{actor}", "note": note, **_by(acting)},
                now=now,
            )
        events.insert(
            connection,
            events.row(
                task_id=task.task_id,
                kind=EventKind.REVIEW,
                by=actor,
                at=now,
                reason=note,
                data={"case_id": case.case_id, "effect": effect, **acting},
            ),
        )


def _answers(request: ReviewRequest, ops: list[Operation]) -> dict[int, str]:
    """The answer for each operation a review speaks for (open, or raised: :func:`unsettled`),
    from ``operations`` or else ``effect``; ValidationFailed for one left unanswered or an id
    that is not an unsettled operation of the attempt."""
    open_ids = {op.operation_id: op for op in ops if unsettled(op)}
    stray = sorted(set(request.operations) - set(open_ids))
    if stray:
        raise ValidationFailed(
            "operations", f"{stray[0]} is not an unsettled operation of this case"
        )
    answers: dict[int, str] = {}
    for op_id, op in open_ids.items():
        said = request.operations.get(op_id, request.effect)
        if said is None:
            raise ValidationFailed("operations", f"say present or absent for {op.name} ({op_id})")
        answers[op_id] = said
    return answers


def _overall(effect: str | None, answers: Mapping[int, str]) -> str:
    """What the review says as a whole: ``present``/``absent`` when every answer agrees."""
    said = set(answers.values()) or {effect or "absent"}
    return said.pop() if len(said) == 1 else "mixed"


def _by(acting: Mapping[str, Any]) -> dict[str, Any]:
    return {"principal": acting["principal"]} if acting.get("principal") else {}


def check_approver(task: Task, actor: str, what: str) -> None:
    """NotAuthorized unless ``actor`` is one of the TASK's approvers."""
    allowed = approvers(task)
    if actor not in allowed:
        raise NotAuthorized(
            f"{actor} may not {what} on {task.task_id}; only its approvers "
            f"({', '.join(sorted(allowed))}) may",
            actor=actor,
            allowed=sorted(allowed),
        )
