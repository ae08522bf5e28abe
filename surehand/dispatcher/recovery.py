"""Loss, recovery requests and reviews: everything that opens or re-decides an interruption case.

``lose`` marks a running attempt ``SESSION_LOST`` and opens its case (one per attempt, enforced
by a unique key, so two reconcilers produce one case). ``recover`` is a caller's request; a
server-side classifier reads durable state to tell an interruption from normal rework, which
keeps its own lifecycle paths. ``review`` records an approver's statement of the effect and runs
admission again on it. All of them end in :meth:`Admitter.admit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import Connection

from surehand.config import Settings
from surehand.dispatcher.admission import Admitter
from surehand.dispatcher.context import Services
from surehand.dispatcher.lifecycle import approvers
from surehand.errors import (
    CaseNotFound,
    DuplicateKey,
    LeaseUnavailable,
    NotAuthorized,
    RecoveryError,
    TaskNotFound,
    ValidationFailed,
)
from surehand.model import (
    Admission,
    Attempt,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    InterruptionCase,
    Task,
)
from surehand.requests import check_role
from surehand.store import attempts, cases, events, operations, tasks

INTERRUPTED = (AttemptState.SESSION_LOST, AttemptState.FAILED, AttemptState.LEASE_LOST)


def case_id_for(attempt: Attempt) -> str:
    return f"CASE-{attempt.task_id.removeprefix('TASK-')}-{attempt.number}"


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

    def open_case(self, attempt: Attempt, *, by: str) -> InterruptionCase:
        """Open (or find) the case of an interrupted attempt and run admission on it."""
        try:
            with self.services.store.transaction() as connection:
                self._insert_case(connection, attempt, self.services.clock.now())
        except DuplicateKey:
            pass  # a concurrent request opened it first: one case per attempt
        return self.admitter.admit(case_id_for(attempt), decided_by=by)

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

    def recover(self, task_id: str, *, actor: str, tenant: str | None) -> RecoveryOutcome:
        """A request to start a successor for ``task_id``; classified from durable state."""
        actor = _actor(actor)
        task, current = self._read(task_id, tenant)
        if task.bucket is not Bucket.ACTIVE:
            return self._refuse(
                task,
                actor,
                f"not an interruption: {task_id} is in {task.bucket.value}; rework, reopen and "
                "reassignment keep their own lifecycle paths",
            )
        if current is None:
            return self._refuse(task, actor, f"{task_id} has no attempt to recover")
        if current.state is AttemptState.RUNNING:
            return self._recover_running(task, current, actor)
        if current.state not in INTERRUPTED:
            # Classified from durable state, not from the caller: the TASK's current attempt
            # ended normally, so it is active again by rework (reject/reopen), not interrupted.
            return self._refuse(
                task,
                actor,
                f"not an interruption: attempt {current.number} of {task_id} ended "
                f"{current.state.value}; rework and reassignment keep their own lifecycle paths",
            )
        case = self._case(current) or self.open_case(current, by=actor)
        if case.state is CaseState.OPEN and case.admission is not Admission.HOLD_FOR_REVIEW:
            case = self.admitter.admit(case.case_id, decided_by=actor)
        return RecoveryOutcome(task_id, case.admission or Admission.NOT_ADMITTED, "decided", case)

    def _recover_running(self, task: Task, current: Attempt, actor: str) -> RecoveryOutcome:
        try:
            holder = self.admitter.leases.holder(task.task_id)
        except LeaseUnavailable:
            return self._refuse(task, actor, "Redis is unreachable: the owner may be alive")
        if holder == current.attempt_id:
            return self._refuse(task, actor, f"attempt {current.number} holds a live lease")
        grace = loss_grace(self.services.settings)
        missing_since = current.lease_missing_since
        if missing_since is None or self.services.clock.now() - missing_since < grace:
            return self._refuse(
                task,
                actor,
                f"the lease of attempt {current.number} is missing for less than the "
                "grace window; the reconciler confirms the loss first",
            )
        case = self.lose(current, state=AttemptState.SESSION_LOST, by=actor)
        if case is None:
            return self._refuse(task, actor, "the attempt changed while it was being recovered")
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

    def _refuse(self, task: Task, actor: str, reason: str) -> RecoveryOutcome:
        """``not_admitted``: keep the owner, start nothing, and record that it was asked."""
        with self.services.store.transaction() as connection:
            events.insert(
                connection,
                events.row(
                    task_id=task.task_id,
                    kind=EventKind.ADMISSION,
                    by=actor,
                    at=self.services.clock.now(),
                    data={"admission": Admission.NOT_ADMITTED.value, "reason": reason},
                ),
            )
        return RecoveryOutcome(task.task_id, Admission.NOT_ADMITTED, reason)

    # -- review -------------------------------------------------------------------------------

    def review(
        self,
        case_id: str,
        *,
        effect: Literal["present", "absent"],
        note: str,
        actor: str,
        tenant: str | None,
    ) -> InterruptionCase:
        """An approver states whether a held case's effect happened; admission runs again."""
        actor = _actor(actor)
        case, task = self._held_case(case_id, tenant)
        if actor not in approvers(task):
            raise NotAuthorized(
                f"{actor} may not review {case_id}; the approvers of {task.task_id} are "
                f"{', '.join(sorted(approvers(task)))}"
            )
        if not note.strip():
            raise RecoveryError("a review needs a note saying how the effect was checked")
        self._record_review(case, task, effect=effect, note=note, actor=actor)
        return self.admitter.admit(case_id, decided_by=actor)

    def _held_case(self, case_id: str, tenant: str | None) -> tuple[InterruptionCase, Task]:
        with self.services.store.snapshot() as connection:
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
        self, case: InterruptionCase, task: Task, *, effect: str, note: str, actor: str
    ) -> None:
        now = self.services.clock.now()
        review = {"effect": effect, "note": note, "by": actor, "at": now.isoformat()}
        with self.services.store.transaction() as connection:
            cases.set_review(connection, case.case_id, review)
            # The reviewed fact becomes the record of every unsettled operation of the
            # interrupted attempt (open, or raised with an unknown effect), so a later session
            # of this TASK neither repeats a present effect nor refuses an absent one.
            for op in operations.for_attempt(connection, case.interrupted_attempt_id):
                operations.confirm(
                    connection,
                    op.operation_id,
                    present=effect == "present",
                    source={"source": f"review:{actor}", "note": note},
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
                    data={"case_id": case.case_id, "effect": effect},
                ),
            )


def _actor(actor: str) -> str:
    """A requesting role, validated at the edge (never the runtime's own SYSTEM)."""
    try:
        return check_role(actor)
    except ValueError as error:
        raise ValidationFailed("actor", str(error)) from None
