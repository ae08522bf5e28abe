"""Cancel a TASK: the one service function every door (Python, CLI, HTTP, MCP, console) calls.

Allowed to the TASK's sender, its approvers and an ADMIN of its tenant
(:func:`lifecycle.cancellers`); a caller acts as its principal's role (only ADMIN acts for
another, and that is recorded). The request is written once, compare-and-set, with a
``cancel_requested`` event naming the principal; asking again changes nothing and answers
what the first request started. What happens next depends on where the TASK is:

* ``inbox``: archived at once (action ``cancel``), in the same transaction. The claim's
  compare-and-set (``bucket = 'inbox' AND cancel_requested_at IS NULL``) and this one exclude
  each other: either the claim won (the TASK is ``active`` and its session is stopped as
  below) or the TASK is never claimed.
* ``active`` with a running attempt: the request stays in the store; the worker that runs the
  session reads it at the next tick of its stop watch (:mod:`surehand.dispatcher.stops`),
  stops the session's whole process tree and ends the attempt ``interrupted``, cause
  ``cancelled``. Admission then decides from the effect facts: an open intent holds the TASK
  for its approver; otherwise it is archived with a REPORT written from the records.
* ``active`` and held: recorded only. The hold stays; the approver's review decides the
  effect, and admission then archives the TASK instead of running it again.
* ``active`` between attempts (an admitted successor not started, rework not claimed): no
  successor is claimed any more (claims refuse a cancelled TASK); admission runs again and
  archives it with a REPORT from the records; awaiting rework, it is archived at once.
* ``review``, ``done``, ``archive``: refused (IllegalTransition): nothing runs to stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection

from surehand.call_requests import CancelTaskRequest, parse
from surehand.dispatcher import dependency_holds, lifecycle
from surehand.dispatcher.context import Services
from surehand.dispatcher.reports import write_report_in
from surehand.errors import Conflict, TaskNotFound
from surehand.model import (
    SYSTEM,
    Action,
    Admission,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    Fence,
    InterruptionCase,
    ReportStatus,
    Task,
)
from surehand.principals import Principal, acting_for
from surehand.requests import ReportRequest
from surehand.store import attempts, cases, dependencies, events, operations, task_moves, tasks

Admit = Callable[[str], InterruptionCase]


@dataclass(frozen=True)
class CancelOutcome:
    """What a cancel request did: ``archived`` (nothing ran, or nothing runs any more),
    ``stopping`` (its running session is being stopped), ``held`` (recorded; the hold stays
    for the approver), ``pending`` (admission decides on the next reconciler pass)."""

    task: Task
    outcome: str
    detail: str
    repeated: bool = False
    case_id: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "task_id": self.task.task_id,
            "outcome": self.outcome,
            "detail": self.detail,
            "repeated": self.repeated,
            "case_id": self.case_id,
            "bucket": self.task.bucket.value,
            "cancel": self.task.cancel.to_dict() if self.task.cancel else None,
        }


def cancel(
    services: Services,
    task_id: str,
    *,
    actor: str,
    reason: str,
    tenant: str | None,
    principal: Principal | None = None,
    admit: Admit | None = None,
) -> CancelOutcome:
    """Cancel ``task_id`` as ``actor`` (see the module docstring for what follows).

    ``admit`` runs admission on a case at once (an interrupted TASK between attempts); without
    it the reconciler's next pass decides. NotAuthorized, IllegalTransition, TaskNotFound and
    ValidationFailed write nothing.
    """
    request = parse(CancelTaskRequest, task_id=task_id, actor=actor, reason=reason)
    acting = acting_for(principal, request.actor, "actor")
    with services.store.transaction() as connection:
        task = _load(connection, request.task_id, tenant)
        lifecycle.check_authority(task, Action.CANCEL, request.actor)
        repeated = task.cancel is not None
        if not repeated:
            task = _record(connection, services, task, request, acting)
        outcome = _next(connection, services, task, repeated)
        cascade(connection, services, task, request.actor, acting)
    if outcome.outcome == "pending" and admit is not None:
        return _admitted(services, outcome, admit)
    return outcome


def _load(connection: Connection, task_id: str, tenant: str | None) -> Task:
    task = tasks.get_for_update(connection, task_id)
    if task is None or (tenant is not None and task.tenant != tenant):
        raise TaskNotFound(f"no {task_id} in tenant {tenant!r}; `surehand tasks` lists them")
    return task


def _record(
    connection: Connection,
    services: Services,
    task: Task,
    request: CancelTaskRequest,
    acting: dict[str, object],
) -> Task:
    """Check the edge, then write the request once (compare-and-set)."""
    lifecycle.check_edge(task, Action.CANCEL)
    now = services.clock.now()
    written = task_moves.update_returning(
        connection,
        task.task_id,
        expect={"revision": task.revision, "cancel_requested_at": None},
        values={
            "cancel_requested_at": now,
            "cancel_requested_by": request.actor,
            "cancel_reason": request.reason.strip(),
        },
        now=now,
    )
    if written is None:
        raise Conflict(f"{task.task_id} changed while it was being cancelled; ask again")
    events.insert(
        connection,
        events.row(
            task_id=task.task_id,
            kind=EventKind.CANCEL_REQUESTED,
            by=request.actor,
            principal=_name(acting),
            at=now,
            reason=request.reason.strip(),
            data={"bucket": task.bucket.value, **acting},
        ),
    )
    why = f"was cancelled ({written.cancel.reason if written.cancel else request.reason})"
    dependencies.hold_dependants(connection, written, why, now)
    return written


def _next(
    connection: Connection,
    services: Services,
    task: Task,
    repeated: bool,
    by: str | None = None,
) -> CancelOutcome:
    """What the (recorded) request leads to now, applied where it is immediate. ``by``: who
    moves it to archive (default: the requester; the runtime in a cascade, whose permission
    was checked on the parent)."""
    if task.bucket is Bucket.INBOX:  # a dependency hold is the approver's; cancel decides it
        task = dependency_holds.clear_for_cancel(connection, task, services.clock.now())
        moved = archive_cancelled(connection, services, task, by=by)
        return CancelOutcome(moved, "archived", "cancelled before any session ran", repeated)
    if task.bucket is not Bucket.ACTIVE:
        return CancelOutcome(task, "archived", f"the TASK is in {task.bucket.value}", repeated)
    if task.hold is not None:
        detail = (
            f"recorded; the hold stays: an approver reviews case {task.hold.case_id}, "
            "then the TASK is archived instead of running again"
        )
        return CancelOutcome(task, "held", detail, repeated)
    current = attempts.current(connection, task.task_id)
    if current is not None and current.state is AttemptState.RUNNING:
        detail = f"attempt {current.number} is being stopped on its worker"
        return CancelOutcome(task, "stopping", detail, repeated)
    case = cases.for_attempt(connection, current.attempt_id) if current is not None else None
    if case is not None and case.state is CaseState.OPEN:
        detail = f"admission decides case {case.case_id}"
        return CancelOutcome(task, "pending", detail, repeated, case.case_id)
    moved = archive_cancelled(connection, services, task, by=by)
    return CancelOutcome(moved, "archived", "no session was running", repeated)


def cascade(
    connection: Connection,
    services: Services,
    parent: Task,
    actor: str,
    acting: dict[str, object],
) -> list[CancelOutcome]:
    """Cancel the open children of ``parent`` (whose cancel is recorded) and theirs, in the
    caller's transaction: each is recorded like any cancel, by ``actor`` and ``acting`` (the
    principal) with the reason "parent TASK-… cancelled: <reason>", and goes where its
    bucket leads (an ``inbox`` one archived, a running one stopped). The permission was
    checked on ``parent`` alone, so the children's moves to archive are the runtime's.
    Children in review, done or archive are left alone, and so
    are their own children."""
    assert parent.cancel is not None
    reason = f"parent {parent.task_id} cancelled: {parent.cancel.reason}"
    outcomes = []
    for child in tasks.children(connection, parent.task_id, lock=True):
        if child.cancel is None and child.bucket in (Bucket.INBOX, Bucket.ACTIVE):
            asked = CancelTaskRequest(task_id=child.task_id, actor=actor, reason=reason)
            cause = {**acting, "cascade_from": parent.task_id}
            child = _record(connection, services, child, asked, cause)
            outcomes.append(_next(connection, services, child, False, by=SYSTEM))
        if child.cancel is not None:
            outcomes += cascade(connection, services, child, actor, acting)
    return outcomes


def _admitted(services: Services, outcome: CancelOutcome, admit: Admit) -> CancelOutcome:
    case_id = outcome.case_id
    assert case_id is not None
    decided = admit(case_id)
    with services.store.snapshot() as connection:
        task = tasks.get(connection, outcome.task.task_id)
    assert task is not None
    held = decided.admission is Admission.HOLD_FOR_REVIEW
    detail = f"case {case_id}: {decided.admission.value if decided.admission else 'pending'}"
    state = "held" if held else ("archived" if task.bucket is Bucket.ARCHIVE else "pending")
    return CancelOutcome(task, state, detail, outcome.repeated, case_id)


def archive_cancelled(
    connection: Connection,
    services: Services,
    task: Task,
    *,
    case: InterruptionCase | None = None,
    by: str | None = None,
) -> Task:
    """Move a cancelled TASK to archive (action ``cancel``, with the request's reason). An
    ``active`` one first gets its REPORT (status aborted), written from the records
    (:func:`cancelled_body`); in ``inbox`` nothing ran and no REPORT is written. ``by``: who
    moves it (the requester's role, or the runtime after admission); ``case``: the
    interruption case admission decided, whose attempt the move names."""
    request_of = task.cancel
    assert request_of is not None
    report_id = None
    if task.bucket is Bucket.ACTIVE:
        request = ReportRequest(
            task_id=task.task_id,
            reporter=task.fields.recipient,
            body=cancelled_body(connection, task, case),
            status=ReportStatus.ABORTED,
        )
        attempt_id = case.interrupted_attempt_id if case is not None else None
        written = write_report_in(connection, services, task, request, attempt_id=attempt_id)
        report_id = written.report.report_id
        task = tasks.get_for_update(connection, task.task_id) or task
    move = lifecycle.Move(
        Action.CANCEL,
        by=by or request_of.by,
        now=services.clock.now(),
        reason=request_of.reason,
        report_id=report_id,
        fence=_interrupted(case, task),
        fencing=lifecycle.Fencing.RECORDED,
    )
    return lifecycle.apply(connection, task, move)


def _interrupted(case: InterruptionCase | None, task: Task) -> Fence | None:
    """The fence of the attempt a case stopped, which the cancel's event names."""
    if case is None:
        return None
    return Fence(case.interrupted_attempt_id, task.task_id, case.interrupted_epoch)


def cancelled_body(connection: Connection, task: Task, case: InterruptionCase | None) -> str:
    """The REPORT of a cancelled TASK, from the records: who cancelled and why, each attempt
    and how it ended, and every operation it recorded with its state."""
    assert task.cancel is not None
    lines = [
        f"Cancelled by {task.cancel.by} at {task.cancel.at.isoformat()}: {task.cancel.reason}",
        "Written from the records; nothing was run again.",
        "",
        "Attempts:",
    ]
    history = attempts.for_task(connection, task.task_id)
    for attempt in sorted(history, key=lambda a: a.number):
        cause = attempt.cause.value if attempt.cause else attempt.state.value
        lines.append(f"- attempt {attempt.number}: {attempt.state.value} ({cause})")
        for op in operations.for_attempt(connection, attempt.attempt_id):
            lines.append(
                f"  - operation {op.name} [{op.state.value}] key={op.idempotency_key} "
                f"receipt={op.external_receipt}"
            )
    if not history:
        lines.append("- none")
    if case is not None and case.review:
        lines += ["", f"Review: effect {case.review.get('effect')}: {case.review.get('note', '')}"]
    return "\n".join(lines)


def _name(acting: dict[str, object]) -> str | None:
    found = acting.get("principal")
    return None if found is None else str(found)
