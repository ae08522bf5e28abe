"""A *session* is the execution of one attempt by a worker; it holds the TASK's lease while it
runs, and every write it makes is fenced by its epoch: operations, REPORTs, settle, fail,
interrupt, rollback, wait. (The claim that starts a session: ``dispatcher/claims.py``; how it
settles: ``dispatcher/session_settle.py``, and what a settle writes: ``dispatcher/settling.py``;
how its attempt ends otherwise: ``dispatcher/attempt_ends.py``.)

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
from typing import Any, TypeVar

from sqlalchemy import Connection

from surehand import metrics
from surehand.agents.context import Cancellation
from surehand.dispatcher import attempt_ends, session_settle
from surehand.dispatcher.context import Services
from surehand.dispatcher.reports import jsonable, write_report_in
from surehand.errors import (
    SessionInterrupted,
    StaleOwner,
    StoreUnavailable,
)
from surehand.model import (
    Attempt,
    AttemptCause,
    EventKind,
    ReportStatus,
    Task,
    WriteReportResult,
)
from surehand.requests import ReportRequest, parse_report_request
from surehand.store import attempts, events, tasks

log = logging.getLogger(__name__)
_T = TypeVar("_T")

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
                    raise StaleOwner(self.stale_message(write))
                yield connection
        except StaleOwner:
            self.record_stale(write)
            raise

    def stale_message(self, write: str) -> str:
        """Why ``write`` was refused: this attempt no longer owns the TASK."""
        return (
            f"{write} by attempt {self.attempt.number} ({self.attempt.attempt_id}) of "
            f"{self.task_id} was fenced: that attempt no longer owns the TASK"
        )

    def record_stale(self, write: str) -> None:
        """Record (once per attempt and kind of write) that ``write`` was fenced."""
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
        log.warning("%s", self.stale_message(write))

    def current_task(self, connection: Connection) -> Task:
        task = tasks.get(connection, self.task_id)
        assert task is not None  # fenced: the row exists and is ours
        return task

    def settle(self, result: Any, *, to_review: bool) -> Task:
        """The agent returned ``result``: settle (:func:`.session_settle.settle`)."""
        return session_settle.settle(self, result, to_review=to_review)

    def record_details(self) -> None:
        """Write :attr:`details` now (before a settle, which does not carry them)."""
        with self.fenced("details") as connection:
            attempts.set_details(connection, self.attempt.attempt_id, jsonable(self.details))

    def rollback(self, why: str) -> None:
        """Undo a claim whose session never started work (:func:`.attempt_ends.rollback`)."""
        attempt_ends.rollback(self, why)

    def wait_in(self, connection: Connection, waiting_for: Sequence[str]) -> Task:
        """End this attempt to wait for child TASKs (:func:`.attempt_ends.wait_in`)."""
        return attempt_ends.wait_in(self, connection, waiting_for)

    def fail(self, error: BaseException) -> None:
        """The agent raised: end the attempt ``failed`` (:func:`.attempt_ends.fail`)."""
        attempt_ends.fail(self, error)

    def interrupt(
        self,
        interruption: SessionInterrupted,
        *,
        returned: Any = attempt_ends.NOT_RETURNED,
        repeat: bool = False,
    ) -> None:
        """End the attempt ``interrupted`` (:func:`.attempt_ends.interrupt`)."""
        attempt_ends.interrupt(self, interruption, returned=returned, repeat=repeat)

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
            self.report_request(body, status, submission_id),
            attempt_id=self.attempt.attempt_id,
        )

    def report_request(
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
