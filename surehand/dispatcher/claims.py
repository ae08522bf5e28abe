"""Claiming a TASK for a new attempt: a fresh TASK from ``inbox``, rework sent back by an
approver, or a successor that recovery admission decided on. Always one compare-and-set
transaction; a TASK that is not claimable gets a ``claim_refused`` event and no attempt."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection

from surehand.dispatcher import lifecycle
from surehand.dispatcher.context import Services
from surehand.dispatcher.sessions import Session
from surehand.errors import (
    Conflict,
    DuplicateKey,
    IllegalTransition,
    NotClaimable,
    RolePaused,
    StaleDecision,
    TaskHeld,
)
from surehand.model import (
    SYSTEM,
    Action,
    Admission,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    Fence,
    Task,
)
from surehand.store import (
    attempts,
    cases,
    events,
    operations,
    pauses,
    task_moves,
    task_publishing,
    tasks,
)
from surehand.store.fence import next_epoch

# -- claiming --------------------------------------------------------------------------------


def claim(
    services: Services, task_id: str, *, worker: str, message_id: str | None
) -> Session | None:
    """Claim a TASK in ``inbox``: new attempt, epoch = attempt number, inbox -> active.

    One compare-and-set write; a TASK that is not claimable (claimed already, held, moved
    on) gets a ``claim_refused`` event and None, so duplicate messages are harmless.
    """
    attempt_id = uuid.uuid4().hex
    try:
        now = services.clock.now()
        # The common case, one write (one statement on Postgres): UPDATE ... WHERE bucket =
        # 'inbox' RETURNING, with the running attempt and the claim's event.
        with services.store.one_write() as connection:
            moved = lifecycle.claim(
                connection, task_id, now=now, attempt_id=attempt_id, worker=worker
            )
        if moved is not None:
            attempt = attempts.new_running(
                attempt_id=attempt_id, task_id=task_id, number=moved.epoch, worker=worker, now=now
            )
            return Session(services=services, task=moved, attempt=attempt)
        with services.store.transaction() as connection:
            # Not an unheld inbox TASK: read it to claim a successor or explain the refusal.
            task = tasks.get_for_update(connection, task_id)
            if task is None:
                return None
            _refuse_stopped(connection, task)
            if task.bucket is Bucket.ACTIVE:
                if _is_rework(connection, task):
                    _claim_rework(connection, services, task, attempt_id, worker)
                else:
                    _claim_successor(connection, services, task, attempt_id, worker)
                return _session(services, connection, task_id, attempt_id)
            if task.bucket is Bucket.INBOX and not tasks.ready(connection, task_id):
                raise NotClaimable(f"{task_id} waits for its dependencies to be done")
            number = next_epoch(task.epoch)
            move = lifecycle.Move(
                Action.CLAIM,
                by=SYSTEM,
                now=services.clock.now(),
                fence=Fence(attempt_id, task_id, number),
                fencing=lifecycle.Fencing.OPENS,
            )
            moved = lifecycle.apply(connection, task, move)
            attempt = attempts.new_running(
                attempt_id=attempt_id,
                task_id=task_id,
                number=number,
                worker=worker,
                now=services.clock.now(),
            )
            attempts.insert(connection, attempt)
            return Session(services=services, task=moved, attempt=attempt)
    except RolePaused:
        _park(services, task_id)  # no event: a paused role's TASKs wait without a trace each
        return None
    except (
        IllegalTransition,
        Conflict,
        TaskHeld,
        DuplicateKey,
        NotClaimable,
        StaleDecision,
    ) as refused:
        _record_refusal(services, task_id, worker, message_id, refused)
        return None


def _refuse_stopped(connection: Connection, task: Task) -> None:
    """No session starts for a cancelled TASK, nor for a TASK of a paused role."""
    if task.cancel is not None:
        raise NotClaimable(f"{task.task_id} was cancelled by {task.cancel.by}")
    if pauses.get(connection, task.tenant, task.fields.recipient) is not None:
        raise RolePaused(f"role {task.fields.recipient} is paused; {task.task_id} waits")


def _park(services: Services, task_id: str) -> None:
    """A TASK refused because its role is paused waits unpublished: the sweep leaves paused
    roles alone, and ``resume`` publishes what waited."""
    with services.store.one_write() as connection:
        task_publishing.set_unpublished(connection, task_id)


def _is_rework(connection: Connection, task: Task) -> bool:
    """Durable state, not the caller, says whether an ``active`` TASK awaits rework: its last
    attempt settled -- it succeeded, or it was interrupted and admission wrote its REPORT from
    the records (``reconcile_only``) -- and an approver sent it back (reject or reopen) since."""
    if task.epoch == 0 or task.hold is not None:
        return False
    last = attempts.current(connection, task.task_id)
    if last is None or last.state is AttemptState.SUCCEEDED:
        return last is not None
    case = cases.for_attempt(connection, last.attempt_id)
    return (
        case is not None
        and case.state is CaseState.RESOLVED
        and case.admission is Admission.RECONCILE_ONLY
    )


def _start_attempt(
    connection: Connection,
    services: Services,
    task: Task,
    attempt_id: str,
    worker: str,
    *,
    expect: dict[str, Any],
    values: dict[str, Any],
    data: dict[str, Any],
    bound_operation_id: int | None = None,
    case_id: str | None = None,
) -> int:
    """Bump the epoch of an ``active`` TASK (compare-and-set), insert the running attempt and
    its ATTEMPT_STARTED event; returns the new epoch."""
    number = next_epoch(task.epoch)
    now = services.clock.now()
    expected = {"epoch": task.epoch, "revision": task.revision, **expect}
    if not task_moves.update_if(
        connection, task.task_id, expect=expected, values={"epoch": number, **values}, now=now
    ):
        raise Conflict(f"{task.task_id} changed while its next attempt was being claimed")
    attempts.insert(
        connection,
        attempts.new_running(
            attempt_id=attempt_id,
            task_id=task.task_id,
            number=number,
            worker=worker,
            now=now,
            bound_operation_id=bound_operation_id,
            case_id=case_id,
        ),
    )
    events.insert(
        connection,
        events.row(
            task_id=task.task_id,
            kind=EventKind.ATTEMPT_STARTED,
            by=worker,
            at=now,
            attempt_id=attempt_id,
            epoch=number,
            data=data,
        ),
    )
    return number


def _claim_rework(
    connection: Connection, services: Services, task: Task, attempt_id: str, worker: str
) -> None:
    """A new attempt for a TASK sent back for rework: normal rework keeps its own path and
    opens no interruption case (nothing was interrupted)."""
    _start_attempt(
        connection,
        services,
        task,
        attempt_id,
        worker,
        expect={"hold_case_id": None},
        values={"published": True},
        data={"rework_round": task.rework_round},
    )


def _claim_successor(
    connection: Connection, services: Services, task: Task, attempt_id: str, worker: str
) -> None:
    """Start the successor that admission decided on; a session never decides this itself.

    Claimable only with an open ``reexecute`` case for the interrupted epoch, decided on the
    TASK's current revision (the recovery fence); a stale decision is refused and re-evaluated.
    """
    case = next(
        (
            c
            for c in cases.for_task(connection, task.task_id)
            if c.admission is Admission.REEXECUTE
            and c.successor_attempt_id is None
            and c.state is CaseState.OPEN
        ),
        None,
    )
    if case is None or case.interrupted_epoch != task.epoch or task.hold is not None:
        raise NotClaimable(f"{task.task_id} is active and no successor was admitted for it")
    if case.retry_at is not None and services.clock.now() < case.retry_at:
        raise NotClaimable(
            f"{task.task_id} retries at {case.retry_at.isoformat()} (its role's backoff); the "
            "reconciler publishes it then"
        )
    if case.revision_at_evaluation != task.revision:
        raise StaleDecision(
            f"case {case.case_id} was decided on revision {case.revision_at_evaluation}, the "
            f"TASK is at {task.revision}; admission must run again"
        )
    number = _start_attempt(
        connection,
        services,
        task,
        attempt_id,
        worker,
        expect={},
        values={},
        data={
            "case_id": case.case_id,
            "successor_of": case.interrupted_attempt_id,
            "bound_operation_id": case.bound_operation_id,
        },
        bound_operation_id=case.bound_operation_id,
        case_id=case.case_id,
    )
    if case.bound_operation_id is not None:
        operations.rebind(connection, case.bound_operation_id, attempt_id=attempt_id, epoch=number)
    cases.bind_successor(connection, case.case_id, attempt_id)


def _session(services: Services, connection: Connection, task_id: str, attempt_id: str) -> Session:
    task = tasks.get(connection, task_id)
    attempt = attempts.get(connection, attempt_id)
    assert task is not None
    assert attempt is not None
    return Session(services=services, task=task, attempt=attempt)


def _record_refusal(
    services: Services, task_id: str, worker: str, message_id: str | None, why: Exception
) -> None:
    with services.store.transaction() as connection:
        task = tasks.get(connection, task_id)
        if task is None:
            return
        events.insert(
            connection,
            events.row(
                task_id=task_id,
                kind=EventKind.CLAIM_REFUSED,
                by=worker,
                at=services.clock.now(),
                data={
                    "message_id": message_id,
                    "bucket": task.bucket.value,
                    "epoch": task.epoch,
                    "why": type(why).__name__,
                },
            ),
        )
