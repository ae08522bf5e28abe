"""Session writes, every one fenced by epoch: claim, record return, settle, fail.

A write is applied only while its attempt is the TASK's current running attempt. A write that
matches nothing is rolled back, leaves a ``stale_owner_fenced`` event naming the stale attempt
(in a transaction of its own, so that it survives the rollback) and raises ``StaleOwner``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from surehand.clock import utc_day
from surehand.crashpoints import crash_point
from surehand.dispatcher import lifecycle
from surehand.dispatcher.context import Services
from surehand.dispatcher.reports import (
    body_hash,
    new_report,
    report_event,
    report_id,
    write_report_in,
)
from surehand.errors import DuplicateKey, StaleOwner
from surehand.model import (
    SYSTEM,
    Action,
    Attempt,
    AttemptState,
    EventKind,
    ReportStatus,
    Task,
    WriteReportResult,
)
from surehand.requests import ReportRequest
from surehand.store import attempts, counters, events, session_writes, tasks
from surehand.store import reports as report_rows

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
            events.insert(
                connection,
                events.row(
                    task_id=self.task_id,
                    kind=EventKind.STALE_OWNER_FENCED,
                    by=self.attempt.worker,
                    at=self.services.clock.now(),
                    attempt_id=self.attempt.attempt_id,
                    epoch=self.attempt.number,
                    data={"write": write, "current_epoch": current.epoch if current else None},
                ),
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
        settled = self._settle_at_once(result, returned, review)
        if settled is not None:
            return settled
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

    def _settle_at_once(self, result: Any, returned: Any, review: bool) -> Task | None:
        """The common settle -- no operations, the series' first REPORT, still the owner --
        as one write (one statement on Postgres). None when any of that does not hold: then
        nothing was written and the general path below decides (and explains)."""
        now = self.services.clock.now()
        day = utc_day(now)
        ahead = self.services.store.allocate_ahead("REPORT", day)
        try:
            with self.services.store.one_write() as connection:
                number = (
                    ahead if ahead is not None else counters.next_number(connection, "REPORT", day)
                )
                moved = session_writes.settle_first_report(
                    connection, self._first_report(result, returned, review, now, day, number)
                )
                if moved is None:
                    raise _NotAtOnce  # rolls back the number SQLite allocated above
        except (_NotAtOnce, DuplicateKey):
            return None
        return moved

    def _first_report(
        self, result: Any, returned: Any, review: bool, now: datetime, day: str, number: int
    ) -> session_writes.FirstReport:
        task, attempt = self.task, self.attempt
        request = self._report_request(report_body(result), ReportStatus.DONE, None)
        report = new_report(
            task,
            request,
            report_id=report_id(day, number),
            recipient=task.fields.sender,  # the route write_report checks: back to the sender
            digest=body_hash(request.body),
            attempt_id=attempt.attempt_id,
            now=now,
            previous=None,
        )
        action = Action.SUBMIT if review else Action.FINISH
        return session_writes.FirstReport(
            task=task,
            epoch=attempt.number,
            attempt_id=attempt.attempt_id,
            result=returned,
            target=lifecycle.EDGES[action][1],
            now=now,
            report=report_rows.row(report, task.tenant),
            events=(
                report_event(report),
                lifecycle.settle_event(
                    task.task_id,
                    action,
                    now=now,
                    attempt_id=attempt.attempt_id,
                    epoch=attempt.number,
                    report_id=report.report_id,
                ),
                self._finished_event(now, AttemptState.SUCCEEDED, None),
            ),
        )

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
        events.insert(connection, self._finished_event(now, state, error))

    def _finished_event(
        self, now: datetime, state: AttemptState, error: str | None
    ) -> dict[str, Any]:
        return events.row(
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


class _NotAtOnce(Exception):
    """The one-write settle did not apply; roll back whatever it began."""


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
