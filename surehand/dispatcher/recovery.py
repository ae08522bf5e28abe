"""Loss and recovery requests: what opens an interruption case; reviews re-decide one.

``lose`` marks a running attempt ``SESSION_LOST`` and opens its case (one per attempt, enforced
by a unique key, so two reconcilers produce one case). ``recover`` is a caller's request; a
server-side classifier reads durable state to tell an interruption from normal rework, which
keeps its own lifecycle paths. A review (:func:`surehand.dispatcher.reviews.review`, on this
module's ``admitter``) records an approver's statement of the effect and runs admission again.
All of them end in :meth:`Admitter.admit`.

Who may ask: a recover request belongs to the TASK's approvers (the runtime recovers through
the reconciler, which calls :meth:`Recovery.lose`), a review to its approvers alone. A caller
who may not ask is refused with NotAuthorized and nothing is written; an approver's request that
is not admitted is recorded once per caller and reason within :data:`REFUSAL_WINDOW`, so no
caller can grow a TASK's history by asking again and again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from surehand.call_requests import RecoverRequest, parse
from surehand.config import Settings
from surehand.dispatcher.admission import Admitter, Unset
from surehand.dispatcher.context import Services
from surehand.dispatcher.reviews import check_approver
from surehand.errors import (
    DuplicateKey,
    LeaseUnavailable,
    TaskNotFound,
)
from surehand.model import (
    INTERRUPTED_ENDS,
    Admission,
    Attempt,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    InterruptionCase,
    Task,
    case_id_for,
)
from surehand.principals import Principal, acting_for
from surehand.store import attempts, cases, events, tasks

REFUSAL_WINDOW = timedelta(hours=1)  # a repeated not_admitted request is recorded once per this


def loss_grace(settings: Settings) -> timedelta:
    """How long a lease must stay missing before its session counts as lost: never less than
    one and a half heartbeats, so a lease a heartbeat is about to restore is never judged."""
    return timedelta(seconds=max(settings.lost_grace_seconds, settings.heartbeat_seconds * 1.5))


@dataclass(frozen=True)
class RecoveryOutcome:
    """The answer to a recover request: a decided case, or why none was opened."""

    task_id: str
    admission: Admission
    reason: str
    case: InterruptionCase | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "task_id": self.task_id,
            "admission": self.admission.value,
            "reason": self.reason,
            "case": self.case.to_dict() if self.case else None,
        }


@dataclass(frozen=True)
class Asker:
    """Who asks for a recovery: the acting role, and what its events record of the principal
    (``Principal.acting_for``; empty for an in-process caller)."""

    role: str
    acting: Mapping[str, Any]

    @property
    def name(self) -> str | None:
        found = self.acting.get("principal")
        return None if found is None else str(found)


class Recovery:
    """Opens cases for lost attempts and routes every successor decision through admission."""

    def __init__(self, admitter: Admitter) -> None:
        self.admitter = admitter
        self.services: Services = admitter.services

    # -- loss ---------------------------------------------------------------------------------

    def lose(self, attempt: Attempt, *, state: AttemptState, by: str) -> InterruptionCase | None:
        """Mark a running attempt lost and open its case; None if it was not running anymore.

        The loss and its case commit together, so a reconciler that dies here leaves either a
        running attempt (judged again by the next pass) or a lost one with an undecided case
        (decided by the next pass) — never a lost attempt without a case.
        """
        now = self.services.clock.now()
        with self.services.store.transaction() as connection:
            if not attempts.finish(
                connection, attempt.attempt_id, expect=AttemptState.RUNNING, state=state, now=now
            ):
                return None
            events.insert(
                connection,
                events.row(
                    task_id=attempt.task_id,
                    kind=EventKind.SESSION_LOST,
                    by=by,
                    at=now,
                    attempt_id=attempt.attempt_id,
                    epoch=attempt.number,
                    data={"worker": attempt.worker, "lease_id": attempt.lease_id},
                ),
            )
            self._insert_case(connection, attempt, now)
        return self.admitter.admit(case_id_for(attempt), decided_by=by, seen_decided_at=None)

    def open_case(
        self,
        attempt: Attempt,
        *,
        by: str,
        undecided_only: bool = False,
        principal: str | None = None,
    ) -> InterruptionCase:
        """Open (or find) the case of an interrupted attempt and run admission on it.

        ``undecided_only``: a case that a concurrent caller decided meanwhile keeps that
        decision (two reconciler passes at once decide, and hold, once)."""
        try:
            with self.services.store.transaction() as connection:
                self._insert_case(connection, attempt, self.services.clock.now())
        except DuplicateKey:
            pass  # a concurrent request opened it first: one case per attempt
        seen: Unset | None = None if undecided_only else Unset.ANY
        return self.admitter.admit(
            case_id_for(attempt), decided_by=by, seen_decided_at=seen, principal=principal
        )

    @staticmethod
    def _insert_case(connection: Connection, attempt: Attempt, now: datetime) -> None:
        task = tasks.get(connection, attempt.task_id)
        assert task is not None
        cases.open_case(
            connection,
            case_id=case_id_for(attempt),
            task_id=attempt.task_id,
            attempt_id=attempt.attempt_id,
            epoch=attempt.number,
            lease_id=attempt.lease_id,
            revision=task.revision,
            now=now,
        )

    # -- recover ------------------------------------------------------------------------------

    def recover(
        self, task_id: str, *, actor: str, tenant: str | None, principal: Principal | None = None
    ) -> RecoveryOutcome:
        """A request to start a successor for ``task_id``; classified from durable state.

        Only the TASK's approvers may ask (NotAuthorized otherwise, with nothing recorded);
        ``actor`` is ``principal``'s role unless the principal is an ADMIN.
        """
        request = parse(RecoverRequest, task_id=task_id, actor=actor)
        acting = acting_for(principal, request.actor, "actor")
        task_id, actor = request.task_id, request.actor
        task, current = self._read(task_id, tenant)
        check_approver(task, actor, "recover")
        return self._recover(task, current, Asker(actor, acting))

    def _recover(self, task: Task, current: Attempt | None, asker: Asker) -> RecoveryOutcome:
        task_id = task.task_id
        if task.bucket is not Bucket.ACTIVE:
            return self._refuse(
                task,
                asker,
                f"not an interruption: {task_id} is in {task.bucket.value}; rework, reopen and "
                "reassignment keep their own lifecycle paths",
            )
        if current is None:
            return self._refuse(task, asker, f"{task_id} has no attempt to recover")
        if current.state is AttemptState.RUNNING:
            return self._recover_running(task, current, asker)
        if current.state not in INTERRUPTED_ENDS:
            # Classified from durable state, not from the caller: the TASK's current attempt
            # ended normally, so it is active again by rework (reject/reopen), not interrupted.
            return self._refuse(
                task,
                asker,
                f"not an interruption: attempt {current.number} of {task_id} ended "
                f"{current.state.value}; rework and reassignment keep their own lifecycle paths",
            )
        case = self._case(current) or self.open_case(current, by=asker.role, principal=asker.name)
        if case.state is CaseState.OPEN and case.admission is not Admission.HOLD_FOR_REVIEW:
            case = self.admitter.admit(case.case_id, decided_by=asker.role, principal=asker.name)
        return RecoveryOutcome(task_id, case.admission or Admission.NOT_ADMITTED, "decided", case)

    def _recover_running(self, task: Task, current: Attempt, asker: Asker) -> RecoveryOutcome:
        try:
            holder = self.admitter.leases.holder(task.task_id)
        except LeaseUnavailable:
            return self._refuse(task, asker, "Redis is unreachable: the owner may be alive")
        if holder == current.attempt_id:
            return self._refuse(task, asker, f"attempt {current.number} holds a live lease")
        grace = loss_grace(self.services.settings)
        missing_since = current.lease_missing_since
        if missing_since is None or self.services.clock.now() - missing_since < grace:
            return self._refuse(
                task,
                asker,
                f"the lease of attempt {current.number} is missing for less than the "
                "grace window; the reconciler confirms the loss first",
            )
        case = self.lose(current, state=AttemptState.SESSION_LOST, by=asker.role)
        if case is None:
            return self._refuse(task, asker, "the attempt changed while it was being recovered")
        return RecoveryOutcome(task.task_id, case.admission or Admission.NOT_ADMITTED, "lost", case)

    def _read(self, task_id: str, tenant: str | None) -> tuple[Task, Attempt | None]:
        with self.services.store.snapshot() as connection:
            task = tasks.get(connection, task_id, tenant=tenant)
            if task is None:
                raise TaskNotFound(f"no {task_id} here; `surehand tasks` lists them")
            return task, attempts.current(connection, task_id)

    def _case(self, attempt: Attempt) -> InterruptionCase | None:
        with self.services.store.snapshot() as connection:
            return cases.for_attempt(connection, attempt.attempt_id)

    def _refuse(self, task: Task, asker: Asker, reason: str) -> RecoveryOutcome:
        """``not_admitted``: keep the owner, start nothing, and record that it was asked (once
        per caller and reason within :data:`REFUSAL_WINDOW`)."""
        now = self.services.clock.now()
        data = {"admission": Admission.NOT_ADMITTED.value, "reason": reason, **asker.acting}
        with self.services.store.transaction() as connection:
            if not _asked_lately(connection, task.task_id, asker.role, data, now - REFUSAL_WINDOW):
                events.insert(
                    connection,
                    events.row(
                        task_id=task.task_id,
                        kind=EventKind.ADMISSION,
                        by=asker.role,
                        at=now,
                        data=data,
                    ),
                )
        return RecoveryOutcome(task.task_id, Admission.NOT_ADMITTED, reason)


def _asked_lately(
    connection: Connection, task_id: str, actor: str, data: Mapping[str, Any], since: datetime
) -> bool:
    """Whether ``actor`` was refused the same way on this TASK since ``since``."""
    return any(
        event.by == actor and event.data == data and event.at >= since
        for event in events.history(connection, task_id, EventKind.ADMISSION)
    )
