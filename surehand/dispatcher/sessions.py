"""Session writes, every one fenced by epoch: claim, record return, settle, fail, interrupt.

A write is applied only while its attempt is the TASK's current running attempt. A write that
matches nothing is rolled back, leaves a ``stale_owner_fenced`` event naming the stale attempt
(in a transaction of its own, so that it survives the rollback) and raises ``StaleOwner``. One
event per attempt and kind of write (its ``reason``: ``operation_intent``, ``report``,
``settle``...): the first refusal, naming the write; the repeats of a stale agent that keeps
calling add no event (each is logged and counted in ``surehand_fenced_writes_total``).

A write the store could not confirm (``StoreUnavailable``: a killed connection, a failover) is
repeated a bounded number of times with backoff (:meth:`Session.retrying`). Every write
repeated that way is safe to repeat, because its earlier try either rolled back or committed
exactly what the repeat would (the repeat recognises that and writes nothing). When the
retries run out the session is *interrupted*, never failed: :class:`SessionInterrupted`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection

from surehand import metrics
from surehand.agents.context import Cancellation
from surehand.clock import utc_day
from surehand.crashpoints import CrashPoint, crash_point
from surehand.dispatcher import lifecycle
from surehand.dispatcher.context import Services
from surehand.dispatcher.reports import (
    body_hash,
    jsonable,
    new_report,
    report_body,
    report_event,
    report_id,
    write_report_in,
)
from surehand.errors import (
    DuplicateKey,
    EffectLeftOpen,
    SessionInterrupted,
    StaleOwner,
    StoreUnavailable,
)
from surehand.model import (
    SYSTEM,
    Action,
    Attempt,
    AttemptCause,
    AttemptState,
    Bucket,
    EventKind,
    OperationState,
    ReportStatus,
    Task,
    WriteReportResult,
    case_id_for,
)
from surehand.requests import ReportRequest, parse_report_request
from surehand.store import attempts, cases, counters, events, operations, session_writes, tasks
from surehand.store import reports as report_rows

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_NOT_RETURNED: Any = object()  # the agent did not return (None is a result it may return)

# Waits before each repeat of a write the store could not confirm: about 7 s in all, enough
# for a killed connection (the pool reconnects at once) or a quick failover; a longer outage
# interrupts the session (tests set these to zero).
STORE_RETRY_DELAYS: tuple[float, ...] = (0.05, 0.25, 1.0, 2.0, 4.0)
MAX_REFUSED_LATE = 20  # writes refused after a lost lease kept with the attempt's end


@dataclass
class Session:
    """One claimed attempt. Holds no lock itself: the store's epoch is the authority."""

    services: Services
    task: Task
    attempt: Attempt
    cancelled: threading.Event = field(default_factory=Cancellation)
    # Set when the runtime could not record this session's work past its retries: the session
    # ends interrupted even if the agent caught the error and went on (or returned).
    interruption: SessionInterrupted | None = None
    # What the agent tried after the lease was lost, refused before it ran (``AgentPort``): kept
    # with the attempt's end, so the store, not only a log, says the late write was stopped.
    refused_late: list[str] = field(default_factory=list)
    # Set when the session is stopped on purpose (a cancel request, a time limit): its attempt
    # ends interrupted with this cause and goes through admission (dispatcher/stops.py).
    stop_cause: tuple[AttemptCause, str] | None = None
    # The agent ended this attempt to wait for its children (delegation.wait_for).
    waiting: bool = False
    # Its settle moved the TASK to done the general way: dependants may be queued to publish.
    may_release: bool = False
    # What the worker saw of the agent besides its error (``Attempt.details``: output tails,
    # the CLI's accounting, how effects were observed), written with the attempt's end.
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return self.task.task_id

    def stop(self, cause: AttemptCause, why: str) -> None:
        """Stop the session on purpose: its agent is stopped (a command agent's whole process
        tree), its port refuses further writes, and its attempt ends ``cause``."""
        if self.stop_cause is None:
            self.stop_cause = (cause, why)
        if isinstance(self.cancelled, Cancellation):
            self.cancelled.stop(why)
        else:
            self.cancelled.set()

    def refuse_late(self, write: str) -> None:
        """Keep a write refused after the lease was lost: each once, at most
        :data:`MAX_REFUSED_LATE` (an agent calling in a loop must not grow the record)."""
        if write not in self.refused_late and len(self.refused_late) < MAX_REFUSED_LATE:
            self.refused_late.append(write)

    def retrying(self, write: str, call: Callable[[bool], _T]) -> _T:
        """``call(repeat)``, repeated after ``StoreUnavailable`` with the backoff of
        :data:`STORE_RETRY_DELAYS` (``repeat`` is True from the second try on, so the write can
        first look whether its earlier try committed). Raises :class:`SessionInterrupted` (and
        marks the session) when the retries run out or the session loses its lease meanwhile."""
        repeat = False
        for delay in (*STORE_RETRY_DELAYS, None):
            try:
                return call(repeat)
            except StoreUnavailable as error:
                if delay is None or self.cancelled.wait(delay):
                    raise self._interrupted(write, error) from error
                log.warning("%s of %s not confirmed (%s); repeating it", write, self.task_id, error)
                repeat = True
        raise AssertionError("unreachable: the last try returns or raises")

    def _interrupted(self, write: str, error: StoreUnavailable) -> SessionInterrupted:
        self.interruption = SessionInterrupted(
            f"{write} of {self.task_id} could not be recorded ({error}); the session stops and "
            f"attempt {self.attempt.number} is interrupted: admission decides from the "
            "recorded effect facts, and an effect whose outcome was not recorded is held for "
            "review, never repeated blindly",
            cause=AttemptCause.STORE_UNAVAILABLE.value,
            task_id=self.task_id,
            attempt_id=self.attempt.attempt_id,
            write=write,
        )
        return self.interruption

    @contextmanager
    def fenced(self, write: str) -> Iterator[Connection]:
        """A transaction that commits only if this attempt still owns the TASK."""
        try:
            with self.services.store.transaction() as connection:
                if not attempts.fence(connection, self.attempt.fence):
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
        metrics.observe_fenced_write()
        with self.services.store.transaction() as connection:
            current = tasks.get(connection, self.task_id)
            events.insert_once_per_attempt(
                connection,
                events.row(
                    task_id=self.task_id,
                    kind=EventKind.STALE_OWNER_FENCED,
                    by=self.attempt.worker,
                    at=self.services.clock.now(),
                    reason=write.partition(":")[0],  # one event per kind of write
                    attempt_id=self.attempt.attempt_id,
                    epoch=self.attempt.number,
                    data={
                        "write": write,
                        "current_epoch": current.epoch if current else None,
                        **(
                            {"refused_after_lease_lost": self.refused_late}
                            if self.refused_late
                            else {}
                        ),
                    },
                ),
            )
        log.warning("%s", self._stale_message(write))

    def current_task(self, connection: Connection) -> Task:
        task = tasks.get(connection, self.task_id)
        assert task is not None  # fenced: the row exists and is ours
        return task

    # -- settling -----------------------------------------------------------------------------

    def record_return(self, result: Any) -> None:
        """The agent returned: record it (with its result) before anything else settles.
        (Repeated after an unconfirmed commit, it writes the same values again.)"""
        self.retrying("record_return", lambda _repeat: self._record_return(result))

    def _record_return(self, result: Any) -> None:
        with self.fenced("record_return") as connection:
            attempts.record_return(connection, self.attempt.attempt_id, jsonable(result))

    def settle(self, result: Any, *, review: bool) -> Task:
        """Write the REPORT, move the TASK to review (or done), and end the attempt."""
        with self.fenced("settle") as connection:
            return self._settle_in(connection, result, review)

    def settle_returned(self, result: Any, *, review: bool) -> Task:
        """:meth:`settle_once`, repeated while the store cannot confirm it (see
        :meth:`retrying`). A repeat first looks whether the earlier try committed (this
        attempt succeeded): then it returns the TASK as settled and writes nothing."""
        return self.retrying(
            "settle",
            lambda repeat: (
                (self._settled_before() if repeat else None)
                or self.settle_once(result, review=review)
            ),
        )

    def _settled_before(self) -> Task | None:
        with self.services.store.snapshot() as connection:
            mine = attempts.get(connection, self.attempt.attempt_id)
            if mine is None or mine.state is not AttemptState.SUCCEEDED:
                return None
            return self.current_task(connection)

    def settle_once(self, result: Any, *, review: bool) -> Task:
        """Record the agent's return, then settle (:meth:`record_return` + :meth:`settle`).

        The return is fenced and recorded by the first statement. If the attempt recorded
        operations, the return commits on its own before the REPORT is written: admission
        then reads "all settled and the agent returned" and writes the REPORT from records
        instead of running the agent again (RA-7). Without operations, admission answers
        ``reexecute`` whether or not the return was recorded, so the return, the REPORT, the
        move and the end of the attempt commit together, in one transaction.
        """
        returned = jsonable(result)
        settled = self._settle_at_once(result, returned, review)
        if settled is not None:
            return settled
        try:
            with self.services.store.transaction() as connection:
                has_operations = attempts.fence_and_record_return(
                    connection, self.attempt.fence, returned
                )
                if has_operations is None:
                    raise StaleOwner(self._stale_message("record_return"))
                if not has_operations:
                    return self._settle_in(connection, result, review)
        except StaleOwner:
            self._record_stale("record_return")
            raise
        crash_point(CrashPoint.SESSION_AFTER_RETURN)
        self._refuse_open_intents()
        with self.fenced("settle") as connection:
            return self._settle_in(connection, result, review)

    def _refuse_open_intents(self) -> None:
        """A return is no clean end while an effect the agent began has no outcome: raise
        ``EffectLeftOpen`` naming them (the runner ends the attempt ``agent_failed`` with its
        case, and admission holds it: the effect fact is unknown). The return stays recorded,
        so a review ``present`` writes the REPORT from records, with the agent's result."""
        with self.services.store.snapshot() as connection:
            left = [
                op
                for op in operations.for_attempt(connection, self.attempt.attempt_id)
                if op.state is OperationState.INTENT
            ]
        if left:
            named = ", ".join(f"operation {op.operation_id} {op.name!r}" for op in left)
            raise EffectLeftOpen(
                f"the agent returned with {named} begun and never ended (effect_begin without "
                "effect_end): whether it happened is unknown, so the TASK is held for review",
                operation_ids=[op.operation_id for op in left],
            )

    def _settle_at_once(self, result: Any, returned: Any, review: bool) -> Task | None:
        """The common settle -- no operations, the series' first REPORT, still the owner --
        as one write (one statement on Postgres). None when any of that does not hold: then
        nothing was written and the general path below decides (and explains)."""
        now = self.services.clock.now()
        day = utc_day(now)
        ahead = self.services.store.allocate_ahead("REPORT", day)
        try:
            with self.services.store.one_write() as connection:
                number = ahead or counters.allocate(connection, "REPORT", day)
                moved = session_writes.settle_first_report(
                    connection, self._first_report(result, returned, review, now, day, number)
                )
                if moved is None:
                    raise _NotAtOnce  # rolls back the number SQLite allocated above
        except (_NotAtOnce, DuplicateKey):
            return None
        return moved

    def _first_report(
        self,
        result: Any,
        returned: Any,
        review: bool,
        now: datetime,
        day: str,
        number: tuple[int, int],
    ) -> session_writes.FirstReport:
        task, attempt = self.task, self.attempt
        request = self._report_request(report_body(result), ReportStatus.DONE, None)
        report = new_report(
            task,
            request,
            report_id=report_id(day, number[1]),
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
            report=report_rows.row(report, task.tenant, number[0]),
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
        move = lifecycle.Move(
            Action.SUBMIT if review else Action.FINISH,
            by=SYSTEM,
            now=self.services.clock.now(),
            report_id=report.report.report_id,
            report_written=True,
            fence=self.attempt.fence,
        )
        moved = lifecycle.apply(connection, current, move)
        self._end(connection, AttemptState.SUCCEEDED, None)
        # The general path's move to done may have queued dependants (lifecycle.apply); the
        # one-statement path is refused for a TASK that has any.
        self.may_release = moved.bucket is Bucket.DONE
        return moved

    def record_details(self) -> None:
        """Write :attr:`details` now (before a settle, which does not carry them)."""
        with self.fenced("details") as connection:
            attempts.set_details(connection, self.attempt.attempt_id, jsonable(self.details))

    def rollback(self, why: str) -> None:
        """Undo a claim whose session never started work (e.g. its lease stayed taken): the
        attempt fails and the TASK goes back to ``inbox``, unpublished, for the sweep."""
        with self.fenced("rollback") as connection:
            move = lifecycle.Move(
                Action.ROLLBACK,
                by=SYSTEM,
                now=self.services.clock.now(),
                reason=why,
                fence=self.attempt.fence,
                unpublished=True,
            )
            lifecycle.apply(connection, self.current_task(connection), move)
            self._end(connection, AttemptState.FAILED, why, AttemptCause.NOT_STARTED)

    def wait_in(self, connection: Connection, waiting_for: Sequence[str]) -> Task:
        """End this attempt as having returned to wait for ``waiting_for`` (child TASKs): the
        TASK goes back to ``inbox``, unpublished, and the attempt succeeds -- in the caller's
        fenced transaction, which also records what it waits for
        (:func:`surehand.dispatcher.delegation.wait_for`)."""
        why = f"waiting for its children {', '.join(waiting_for)} to be done"
        move = lifecycle.Move(
            Action.WAIT,
            by=SYSTEM,
            now=self.services.clock.now(),
            reason=why,
            fence=self.attempt.fence,
            unpublished=True,
        )
        moved = lifecycle.apply(connection, self.current_task(connection), move)
        self._end(connection, AttemptState.SUCCEEDED, None, AttemptCause.RETURNED)
        return moved

    def fail(self, error: BaseException) -> None:
        """The agent raised: end the attempt ``failed`` (cause ``agent_failed``) and open its
        interruption case in the same transaction. The TASK stays in ``active``; admission
        holds it for its approver, so it is visible and never retried blindly (DESIGN.md
        section 5: no TASK sits in active without a running attempt, an open case or a hold).
        Repeated while the store cannot confirm it, like every session write."""
        why = f"{type(error).__name__}: {error}"
        self.retrying(
            "fail",
            lambda repeat: self._end_with_case(
                AttemptState.FAILED, AttemptCause.AGENT_FAILED, why, write="fail", repeat=repeat
            ),
        )

    def interrupt(
        self,
        interruption: SessionInterrupted,
        *,
        returned: Any = _NOT_RETURNED,
        repeat: bool = False,
    ) -> None:
        """The runtime could not record or renew: end the attempt ``interrupted`` with its
        cause and open its case, which admission decides from the effect facts. ``returned``:
        the agent's result, when it returned and only the settle could not be recorded (then
        admission can write the REPORT from records instead of running the agent again).

        One try per call: the caller decides whether to repeat it (``repeat`` True first looks
        whether an earlier try committed). If it fails, the attempt stays ``running`` and the
        reconciler finds it once its lease is gone (one case either way: a case is unique per
        attempt)."""
        self._end_with_case(
            AttemptState.INTERRUPTED,
            AttemptCause(interruption.cause),
            f"{type(interruption).__name__}: {interruption}",
            write="interrupt",
            repeat=repeat,
            returned=returned,
        )

    def _end_with_case(
        self,
        state: AttemptState,
        cause: AttemptCause,
        error: str,
        *,
        write: str,
        repeat: bool,
        returned: Any = _NOT_RETURNED,
    ) -> None:
        if repeat and self._ended_as(state):
            return  # the earlier try committed; only its reply was lost
        with self.fenced(write) as connection:
            if returned is not _NOT_RETURNED:
                attempts.record_return(connection, self.attempt.attempt_id, jsonable(returned))
            if self.details:
                attempts.set_details(connection, self.attempt.attempt_id, jsonable(self.details))
            self._end(connection, state, error, cause)
            self._open_case(connection)

    def _ended_as(self, state: AttemptState) -> bool:
        with self.services.store.snapshot() as connection:
            mine = attempts.get(connection, self.attempt.attempt_id)
        return mine is not None and mine.state is state

    def _open_case(self, connection: Connection) -> None:
        # Imported here: recovery imports admission, which imports this module.

        cases.open_case(
            connection,
            case_id=case_id_for(self.attempt),
            task_id=self.task_id,
            attempt_id=self.attempt.attempt_id,
            epoch=self.attempt.number,
            lease_id=self.attempt.lease_id,
            revision=self.current_task(connection).revision,
            now=self.services.clock.now(),
        )

    def _end(
        self,
        connection: Connection,
        state: AttemptState,
        error: str | None,
        cause: AttemptCause | None = None,
    ) -> None:
        now = self.services.clock.now()
        attempts.finish(
            connection,
            self.attempt.attempt_id,
            expect=AttemptState.RUNNING,
            state=state,
            now=now,
            error=error,
            cause=cause,
        )
        events.insert(connection, self._finished_event(now, state, error, cause))

    def _finished_event(
        self,
        now: datetime,
        state: AttemptState,
        error: str | None,
        cause: AttemptCause | None = None,
    ) -> dict[str, Any]:
        data: dict[str, Any] = {"state": state.value, "error": error}
        if cause is not None:  # a settle's cause is implied by its state (and not written)
            data["cause"] = cause.value
        return events.row(
            task_id=self.task_id,
            kind=EventKind.ATTEMPT_FINISHED,
            by=self.attempt.worker,
            at=now,
            attempt_id=self.attempt.attempt_id,
            epoch=self.attempt.number,
            data=data,
        )

    def report(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult:
        """Write a REPORT; repeated while the store cannot confirm it (a repeat of a REPORT
        that landed is deduplicated by its content and writes nothing)."""
        return self.retrying("report", lambda _repeat: self._report(body, status, submission_id))

    def _report(
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
        # Validated like every door's request: a body the agent made (a NUL, a lone
        # surrogate, over 1 MiB) is a typed ValidationFailed, never pydantic's own error.
        return parse_report_request(
            {
                "task_id": self.task_id,
                "reporter": self.task.fields.recipient,
                "body": body,
                "status": status,
                "client_submission_id": submission_id,
            }
        )


class _NotAtOnce(Exception):
    """The one-write settle did not apply; roll back whatever it began."""
