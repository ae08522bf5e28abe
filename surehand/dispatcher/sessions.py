"""Session writes, every one fenced by epoch: claim, record return, settle, fail.

A write is applied only while its attempt is the TASK's current running attempt. A write that
matches nothing is rolled back, leaves a ``stale_owner_fenced`` event naming the stale attempt
(in a transaction of its own, so that it survives the rollback) and raises ``StaleOwner``.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from surehand.crashpoints import crash_point
from surehand.dispatcher import lifecycle
from surehand.dispatcher.context import Services
from surehand.dispatcher.reports import write_report_in
from surehand.errors import (
    Conflict,
    DuplicateKey,
    IllegalTransition,
    NotClaimable,
    StaleDecision,
    StaleOwner,
    TaskHeld,
)
from surehand.model import (
    SYSTEM,
    Action,
    Admission,
    Attempt,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    ReportStatus,
    Task,
    WriteReportResult,
)
from surehand.requests import ReportRequest
from surehand.store import attempts, cases, events, operations, tasks

log = logging.getLogger(__name__)


@dataclass
class Session:
    """One claimed attempt. Holds no lock itself: the store's epoch is the authority."""

    services: Services
    task: Task
    attempt: Attempt
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @contextmanager
    def fenced(self, write: str) -> Iterator[Connection]:
        """A transaction that commits only if this attempt still owns the TASK."""
        try:
            with self.services.store.transaction() as connection:
                if not attempts.fence(connection, self.attempt.attempt_id, self.task_id):
                    raise StaleOwner(self._stale_message(write))
                yield connection
        except StaleOwner:
            self._record_stale(write)
            raise

    def _stale_message(self, write: str) -> str:
        return (
            f"{write} by attempt {self.attempt.number} ({self.attempt.attempt_id}) of "
            f"{self.task_id} was fenced: that attempt no longer owns the TASK"
        )

    def _record_stale(self, write: str) -> None:
        with self.services.store.transaction() as connection:
            current = tasks.get(connection, self.task_id)
            events.append(
                connection,
                task_id=self.task_id,
                kind=EventKind.STALE_OWNER_FENCED,
                by=self.attempt.worker,
                at=self.services.clock.now(),
                attempt_id=self.attempt.attempt_id,
                epoch=self.attempt.number,
                data={"write": write, "current_epoch": current.epoch if current else None},
            )
        log.warning("%s", self._stale_message(write))

    def current_task(self, connection: Connection) -> Task:
        task = tasks.get(connection, self.task_id)
        assert task is not None  # fenced: the row exists and is ours
        return task

    # -- settling -----------------------------------------------------------------------------

    def record_return(self, result: Any) -> None:
        """The agent returned: record it (with its result) before anything else settles."""
        with self.fenced("record_return") as connection:
            attempts.record_return(connection, self.attempt.attempt_id, _jsonable(result))

    def settle(self, result: Any, *, review: bool) -> Task:
        """Write the REPORT, move the TASK to review (or done), and end the attempt."""
        with self.fenced("settle") as connection:
            return self._settle_in(connection, result, review)

    def settle_returned(self, result: Any, *, review: bool) -> Task:
        """Record the agent's return, then settle (:meth:`record_return` + :meth:`settle`).

        The return is fenced and recorded by the first statement. If the attempt recorded
        operations, the return commits on its own before the REPORT is written: admission
        then reads "all settled and the agent returned" and writes the REPORT from records
        instead of running the agent again (RA-7). Without operations, admission answers
        ``reexecute`` whether or not the return was recorded, so the return, the REPORT, the
        move and the end of the attempt commit together, in one transaction.
        """
        returned = _jsonable(result)
        try:
            with self.services.store.transaction() as connection:
                has_operations = attempts.fence_and_record_return(
                    connection, self.attempt.attempt_id, self.task_id, returned
                )
                if has_operations is None:
                    raise StaleOwner(self._stale_message("record_return"))
                if not has_operations:
                    return self._settle_in(connection, result, review)
        except StaleOwner:
            self._record_stale("record_return")
            raise
        crash_point("session.after_return")
        with self.fenced("settle") as connection:
            return self._settle_in(connection, result, review)

    def _settle_in(self, connection: Connection, result: Any, review: bool) -> Task:
        """REPORT, move and end, in the caller's fenced transaction."""
        current = tasks.get_for_update(connection, self.task_id)
        assert current is not None  # fenced: the row exists and is ours
        report = write_report_in(
            connection,
            self.services,
            current,
            self._report_request(report_body(result), ReportStatus.DONE, None),
            attempt_id=self.attempt.attempt_id,
            locked=True,
        )
        moved = lifecycle.apply(
            connection,
            current,
            Action.SUBMIT if review else Action.FINISH,
            by=SYSTEM,
            now=self.services.clock.now(),
            report_id=report.report.report_id,
            report_written=True,
            extra_expect={"epoch": self.attempt.number},
            attempt_id=self.attempt.attempt_id,
            epoch=self.attempt.number,
        )
        self._end(connection, AttemptState.SUCCEEDED, None)
        return moved

    def rollback(self, why: str) -> None:
        """Undo a claim whose session never started work (e.g. its lease stayed taken): the
        attempt fails and the TASK goes back to ``inbox``, unpublished, for the sweep."""
        with self.fenced("rollback") as connection:
            lifecycle.apply(
                connection,
                self.current_task(connection),
                Action.ROLLBACK,
                by=SYSTEM,
                now=self.services.clock.now(),
                reason=why,
                extra_expect={"epoch": self.attempt.number},
                extra_values={"published": False},
                attempt_id=self.attempt.attempt_id,
                epoch=self.attempt.number,
            )
            self._end(connection, AttemptState.FAILED, why)

    def fail(self, error: BaseException) -> None:
        """The agent raised: record the failed attempt; the TASK stays in active, visible."""
        with self.fenced("fail") as connection:
            self._end(connection, AttemptState.FAILED, f"{type(error).__name__}: {error}")

    def _end(self, connection: Connection, state: AttemptState, error: str | None) -> None:
        now = self.services.clock.now()
        attempts.finish(
            connection,
            self.attempt.attempt_id,
            expect=AttemptState.RUNNING,
            state=state,
            now=now,
            error=error,
        )
        events.append(
            connection,
            task_id=self.task_id,
            kind=EventKind.ATTEMPT_FINISHED,
            by=self.attempt.worker,
            at=now,
            attempt_id=self.attempt.attempt_id,
            epoch=self.attempt.number,
            data={"state": state.value, "error": error},
        )

    def report(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult:
        with self.fenced("report") as connection:
            return self.write_report_in(connection, body, status, submission_id)

    def write_report_in(
        self, connection: Connection, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult:
        return write_report_in(
            connection,
            self.services,
            self.current_task(connection),
            self._report_request(body, status, submission_id),
            attempt_id=self.attempt.attempt_id,
        )

    def _report_request(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> ReportRequest:
        return ReportRequest(
            task_id=self.task_id,
            reporter=self.task.fields.recipient,
            body=body,
            status=status,
            client_submission_id=submission_id,
        )


def report_body(result: Any) -> str:
    """The REPORT body made from an agent's return value."""
    if result is None:
        return "(the agent returned no result)"
    if isinstance(result, str):
        return result if result.strip() else "(the agent returned an empty result)"
    return json.dumps(_jsonable(result), ensure_ascii=False, indent=2, sort_keys=True)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


# -- claiming --------------------------------------------------------------------------------


def claim(
    services: Services, task_id: str, *, worker: str, message_id: str | None
) -> Session | None:
    """Claim a TASK in ``inbox``: new attempt, epoch = attempt number, inbox -> active.

    One compare-and-set transaction; a TASK that is not claimable (claimed already, held, moved
    on) gets a ``claim_refused`` event and None, so duplicate messages are harmless.
    """
    attempt_id = uuid.uuid4().hex
    try:
        with services.store.transaction() as connection:
            now = services.clock.now()
            moved = lifecycle.claim(connection, task_id, now=now, attempt_id=attempt_id)
            if moved is not None:  # the common case: one UPDATE ... RETURNING, one INSERT
                attempt = attempts.insert_running(
                    connection,
                    attempt_id=attempt_id,
                    task_id=task_id,
                    number=moved.epoch,
                    worker=worker,
                    lease_id=attempt_id,
                    now=now,
                )
                return Session(services=services, task=moved, attempt=attempt)
            # Not an unheld inbox TASK: read it to claim a successor or explain the refusal.
            task = tasks.get_for_update(connection, task_id)
            if task is None:
                return None
            if task.bucket is Bucket.ACTIVE:
                if _is_rework(connection, task):
                    _claim_rework(connection, services, task, attempt_id, worker)
                else:
                    _claim_successor(connection, services, task, attempt_id, worker)
                return _session(services, connection, task_id, attempt_id)
            number = task.epoch + 1
            moved = lifecycle.apply(
                connection,
                task,
                Action.CLAIM,
                by=SYSTEM,
                now=services.clock.now(),
                extra_expect={"epoch": task.epoch, "hold_case_id": None},
                extra_values={"epoch": number},
                attempt_id=attempt_id,
                epoch=number,
            )
            attempt = attempts.insert_running(
                connection,
                attempt_id=attempt_id,
                task_id=task_id,
                number=number,
                worker=worker,
                lease_id=attempt_id,
                now=services.clock.now(),
            )
            return Session(services=services, task=moved, attempt=attempt)
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


def _is_rework(connection: Connection, task: Task) -> bool:
    """Durable state, not the caller, says whether an ``active`` TASK awaits rework: its last
    attempt settled (succeeded) and an approver sent it back (reject or reopen) since."""
    if task.epoch == 0 or task.hold is not None:
        return False
    last = attempts.current(connection, task.task_id)
    return last is not None and last.state is AttemptState.SUCCEEDED


def _claim_rework(
    connection: Connection, services: Services, task: Task, attempt_id: str, worker: str
) -> None:
    """A new attempt for a TASK sent back for rework: normal rework keeps its own path and
    opens no interruption case (nothing was interrupted)."""
    number = task.epoch + 1
    now = services.clock.now()
    if not tasks.update_if(
        connection,
        task.task_id,
        expect={"epoch": task.epoch, "revision": task.revision, "hold_case_id": None},
        values={"epoch": number, "published": True},
        now=now,
    ):
        raise Conflict(f"{task.task_id} changed while its rework was being claimed")
    attempts.insert_running(
        connection,
        attempt_id=attempt_id,
        task_id=task.task_id,
        number=number,
        worker=worker,
        lease_id=attempt_id,
        now=now,
    )
    events.append(
        connection,
        task_id=task.task_id,
        kind=EventKind.ATTEMPT_STARTED,
        by=worker,
        at=now,
        attempt_id=attempt_id,
        epoch=number,
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
    if case.revision_at_evaluation != task.revision:
        raise StaleDecision(
            f"case {case.case_id} was decided on revision {case.revision_at_evaluation}, the "
            f"TASK is at {task.revision}; admission must run again"
        )
    number = task.epoch + 1
    now = services.clock.now()
    if not tasks.update_if(
        connection,
        task.task_id,
        expect={"epoch": task.epoch, "revision": task.revision},
        values={"epoch": number},
        now=now,
    ):
        raise Conflict(f"{task.task_id} changed while its successor was being claimed")
    attempts.insert_running(
        connection,
        attempt_id=attempt_id,
        task_id=task.task_id,
        number=number,
        worker=worker,
        lease_id=attempt_id,
        now=now,
        bound_operation_id=case.bound_operation_id,
        case_id=case.case_id,
    )
    if case.bound_operation_id is not None:
        operations.rebind(connection, case.bound_operation_id, attempt_id=attempt_id, epoch=number)
    cases.bind_successor(connection, case.case_id, attempt_id)
    events.append(
        connection,
        task_id=task.task_id,
        kind=EventKind.ATTEMPT_STARTED,
        by=worker,
        at=now,
        attempt_id=attempt_id,
        epoch=number,
        data={
            "case_id": case.case_id,
            "successor_of": case.interrupted_attempt_id,
            "bound_operation_id": case.bound_operation_id,
        },
    )


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
        events.append(
            connection,
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
        )


def is_claimable(task: Task) -> bool:
    return task.bucket is Bucket.INBOX and task.hold is None
