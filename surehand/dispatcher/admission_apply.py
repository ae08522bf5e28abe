"""Admission's decision recorded and applied, in one transaction: the compare-and-set on the
case, its ADMISSION event, and what the decision does to the TASK (a hold, a REPORT written
from records, a cancelled TASK archived, a hold released for a successor)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection

from surehand.dispatcher import lifecycle
from surehand.dispatcher.cancel import archive_cancelled
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import Evidence
from surehand.dispatcher.reports import report_body, write_report_in
from surehand.errors import StaleDecision
from surehand.model import (
    SYSTEM,
    Action,
    Admission,
    Attempt,
    CaseState,
    EventKind,
    Fence,
    InterruptionCase,
    ReportStatus,
    Task,
)
from surehand.requests import ReportRequest
from surehand.store import attempts, cases, dependencies, events, operations, task_moves, tasks


def decide(
    services: Services,
    case: InterruptionCase,
    task: Task,
    evidence: Evidence,
    decided_by: str,
    principal: str | None = None,
) -> InterruptionCase:
    now = services.clock.now()
    resolve = evidence.admission is Admission.RECONCILE_ONLY
    with services.store.transaction() as connection:
        # Decisions on one TASK take turns (row lock), and a decision recorded meanwhile by
        # a concurrent admission (a second reconciler) stands: it is returned, not redone.
        current = tasks.get_for_update(connection, task.task_id)
        assert current is not None
        recorded = _reread(connection, case.case_id)
        if recorded.state is not CaseState.OPEN or recorded.decided_at != case.decided_at:
            return recorded
        if current.revision != task.revision:
            raise StaleDecision(
                f"{task.task_id} changed while case {case.case_id} was evaluated; "
                "admission runs again on the new revision"
            )
        if not cases.decide(
            connection,
            case,
            effect_fact=evidence.fact,
            effect_refs=evidence.refs,
            admission=evidence.admission,
            revision=task.revision,
            decided_by=decided_by,
            bound_operation_id=evidence.bound_operation_id,
            resolve=resolve,
            now=now,
            retry_at=evidence.retry_at,
        ):
            # Another admission decided first; its decision stands.
            return _reread(connection, case.case_id)
        _audit(connection, case, task, evidence, (decided_by, principal), now)
        _apply(connection, services, case, task, evidence)
        # The decision is fenced on the revision the TASK has once it is applied: any later
        # change makes it stale, and a successor claim re-checks it.
        cases.set_evaluated_revision(
            connection, case.case_id, read_task(connection, task.task_id).revision
        )
        return _reread(connection, case.case_id)


def _apply(
    connection: Connection,
    services: Services,
    case: InterruptionCase,
    task: Task,
    evidence: Evidence,
) -> None:
    if evidence.admission is Admission.HOLD_FOR_REVIEW:
        _hold(connection, services, case, task, evidence)
    elif evidence.admission is Admission.RECONCILE_ONLY and evidence.refs.get("cancelled"):
        _cancel(connection, services, case, task)
    elif evidence.admission is Admission.RECONCILE_ONLY:
        _reconcile(connection, services, case, task)
    elif evidence.admission is Admission.REEXECUTE and task.hold is not None:
        _release_hold(connection, services, task)


def read_task(connection: Connection, task_id: str) -> Task:
    """The TASK ``task_id``, which exists (a case names it)."""
    task = tasks.get(connection, task_id)
    assert task is not None
    return task


def _reread(connection: Connection, case_id: str) -> InterruptionCase:
    case = cases.get(connection, case_id)
    assert case is not None
    return case


def _audit(
    connection: Connection,
    case: InterruptionCase,
    task: Task,
    evidence: Evidence,
    decided: tuple[str, str | None],
    now: datetime,
) -> None:
    """The ADMISSION event; ``decided``: the deciding role and the principal's name, if any."""
    events.insert(
        connection,
        events.row(
            task_id=case.task_id,
            kind=EventKind.ADMISSION,
            by=decided[0],
            principal=decided[1],
            at=now,
            attempt_id=case.interrupted_attempt_id,
            epoch=case.interrupted_epoch,
            data={
                "case_id": case.case_id,
                "effect_fact": evidence.fact.value,
                "admission": evidence.admission.value,
                "revision": task.revision,
                "bound_operation_id": evidence.bound_operation_id,
                "inputs": dict(evidence.refs),
            },
        ),
    )


def _hold(
    connection: Connection,
    services: Services,
    case: InterruptionCase,
    task: Task,
    evidence: Evidence,
) -> None:
    reason = f"effect {evidence.fact.value}: {evidence.refs.get('why', 'needs review')}"
    now = services.clock.now()
    if not task_moves.update_if(
        connection,
        task.task_id,
        expect={"revision": task.revision},
        values={"hold_case_id": case.case_id, "hold_reason": reason},
        now=now,
    ):
        raise StaleDecision(f"{task.task_id} changed while its hold was being set")
    events.insert(
        connection,
        events.row(
            task_id=task.task_id,
            kind=EventKind.HOLD,
            by=SYSTEM,
            at=now,
            reason=reason,
            data={"case_id": case.case_id},
        ),
    )
    # A parent waiting for this TASK runs again now, to decide with the hold in its brief.
    dependencies.release_waiting_parent(connection, task, now)


def _reconcile(
    connection: Connection, services: Services, case: InterruptionCase, task: Task
) -> None:
    """Write the REPORT from the records and submit the TASK for review; nothing re-runs."""
    attempt = attempts.get(connection, case.interrupted_attempt_id)
    assert attempt is not None
    body = _reconciled_body(connection, case, attempt)
    request = ReportRequest(
        task_id=task.task_id, reporter=task.fields.recipient, body=body, status=ReportStatus.DONE
    )
    if task.hold is not None:
        task = _release_hold(connection, services, task)
    written = write_report_in(connection, services, task, request, attempt_id=attempt.attempt_id)
    move = lifecycle.Move(
        Action.SUBMIT,
        by=SYSTEM,
        now=services.clock.now(),
        report_id=written.report.report_id,
        fence=Fence(attempt.attempt_id, task.task_id, attempt.number),
        fencing=lifecycle.Fencing.RECORDED,
    )
    lifecycle.apply(connection, read_task(connection, task.task_id), move)


def _cancel(connection: Connection, services: Services, case: InterruptionCase, task: Task) -> None:
    """Archive a cancelled TASK with a REPORT from the records; nothing runs again."""
    if task.hold is not None:
        task = _release_hold(connection, services, task)
    archive_cancelled(connection, services, task, case=case, by=SYSTEM)


def _release_hold(connection: Connection, services: Services, task: Task) -> Task:
    assert task.hold is not None
    now = services.clock.now()
    task_moves.update_if(
        connection,
        task.task_id,
        expect={"hold_case_id": task.hold.case_id},
        values={"hold_case_id": None, "hold_reason": None},
        now=now,
    )
    events.insert(
        connection,
        events.row(
            task_id=task.task_id,
            kind=EventKind.HOLD_RELEASED,
            by=SYSTEM,
            at=now,
            data={"case_id": task.hold.case_id},
        ),
    )
    return read_task(connection, task.task_id)


def _reconciled_body(connection: Connection, case: InterruptionCase, attempt: Attempt) -> str:
    recorded = operations.for_attempt(connection, attempt.attempt_id)
    lines = [
        f"Reconciled from records after attempt {attempt.number} was interrupted "
        f"(case {case.case_id}); no effect was repeated.",
        "",
    ]
    if attempt.agent_returned:
        lines += ["Agent result:", report_body(attempt.result), ""]
    if case.review:
        lines += [f"Review: effect {case.review.get('effect')} — {case.review.get('note', '')}", ""]
    lines += ["Operations:"] + [
        f"- {op.name} [{op.state.value}] key={op.idempotency_key} receipt={op.external_receipt}"
        for op in recorded
    ]
    return "\n".join(lines)
