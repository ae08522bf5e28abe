"""What a settle writes, built once, and the two ways of writing it.

A *settle* is the clean end of an attempt whose agent returned: its return is recorded, the
result becomes the REPORT, the TASK moves to ``review`` (submit) or straight to ``done``
(finish), and the attempt ends ``succeeded`` (cause ``returned``). The one entry point is
:meth:`surehand.dispatcher.sessions.Session.settle`; this module holds what it writes.

:class:`Settlement` is built once per try and is the only source of the rows: the REPORT's
request, the move (hence its TRANSITION event), the recorded return and the attempt's end
(hence its ATTEMPT_FINISHED event). Two writers take them from it:

* :func:`write_at_once` -- the common settle (no operations, the series' first REPORT, no
  dependants, still the owner) as one write: one statement on Postgres
  (:func:`surehand.store.session_writes.settle_first_report`). It writes nothing and answers
  None when any of that does not hold.
* :func:`write_in` -- the general path, in the caller's fenced transaction
  (``write_report_in``, ``lifecycle.apply``), which explains every refusal with its typed
  error.

Both build the REPORT with ``new_report``/``report_event``, the TRANSITION event with
``lifecycle.move_event`` of the same :class:`~surehand.dispatcher.lifecycle.Move`, and the
attempt's end with the same :class:`AttemptEnd`, so they write the same rows by construction;
``tests/store/test_session_fastpath.py`` checks that property on both stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from surehand.clock import utc_day
from surehand.dispatcher import lifecycle
from surehand.dispatcher.context import Services
from surehand.dispatcher.reports import (
    body_hash,
    new_report,
    report_event,
    report_id,
    write_report_in,
)
from surehand.errors import DuplicateKey
from surehand.model import SYSTEM, Action, Attempt, AttemptCause, AttemptState, EventKind, Task
from surehand.requests import ReportRequest
from surehand.store import attempts, counters, events, session_writes, tasks
from surehand.store import reports as report_rows


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ends: the values its row gets and, from the same values, its
    ATTEMPT_FINISHED event (every end of an attempt, not only a settle's)."""

    state: AttemptState
    now: datetime
    error: str | None = None
    cause: AttemptCause | None = None  # None: the cause its state implies (a settle's)

    def event(self, attempt: Attempt) -> dict[str, Any]:
        """The ATTEMPT_FINISHED event of ``attempt`` ending this way."""
        data: dict[str, Any] = {"state": self.state.value, "error": self.error}
        if self.cause is not None:  # a settle's cause is implied by its state (and not written)
            data["cause"] = self.cause.value
        return events.row(
            task_id=attempt.task_id,
            kind=EventKind.ATTEMPT_FINISHED,
            by=attempt.worker,
            at=self.now,
            attempt_id=attempt.attempt_id,
            epoch=attempt.number,
            data=data,
        )

    def write(self, connection: Connection, attempt: Attempt) -> None:
        """End the running ``attempt`` this way and append its event, in the caller's
        (fenced) transaction."""
        attempts.finish(
            connection,
            attempt.attempt_id,
            expect=AttemptState.RUNNING,
            state=self.state,
            now=self.now,
            error=self.error,
            cause=self.cause,
        )
        events.insert(connection, self.event(attempt))


@dataclass(frozen=True)
class Settlement:
    """Everything one try of a settle writes, known before it writes anything.

    ``request``: the REPORT the agent's result becomes; ``returned``: the result as recorded
    (``jsonable``); ``action``: submit (to review) or finish (to done); ``end``: the attempt's
    end, whose ``now`` is the settle's time.
    """

    attempt: Attempt
    request: ReportRequest
    returned: Any
    action: Action
    end: AttemptEnd

    def move(self, report_id: str) -> lifecycle.Move:
        """The TASK's move, citing the REPORT written (or found) in the same write."""
        return lifecycle.Move(
            self.action,
            by=SYSTEM,
            now=self.end.now,
            report_id=report_id,
            report_written=True,
            fence=self.attempt.fence,
        )

    def first_report(
        self, task: Task, day: str, number: tuple[int, int]
    ) -> session_writes.FirstReport:
        """The one-write settle's rows, the REPORT being its series' first (``number``: the
        day counter's sequence and number)."""
        now = self.end.now
        report = new_report(
            task,
            self.request,
            report_id=report_id(day, number[1]),
            recipient=task.fields.sender,  # the route write_report checks: back to the sender
            digest=body_hash(self.request.body),
            attempt_id=self.attempt.attempt_id,
            now=now,
            previous=None,
        )
        move = self.move(report.report_id)
        return session_writes.FirstReport(
            task=task,
            epoch=self.attempt.number,
            attempt_id=self.attempt.attempt_id,
            result=self.returned,
            target=lifecycle.EDGES[move.action][1],
            now=now,
            report=report_rows.row(report, task.tenant, number[0]),
            events=(
                report_event(report),
                lifecycle.settle_event(task.task_id, move),
                self.end.event(self.attempt),
            ),
        )


def write_at_once(services: Services, task: Task, settlement: Settlement) -> Task | None:
    """The common settle as one write (``task``: as the attempt claimed it). None when a
    guard does not hold: then nothing was written and the general path decides (and
    explains)."""
    day = utc_day(settlement.end.now)
    ahead = services.store.allocate_ahead("REPORT", day)
    try:
        with services.store.one_write() as connection:
            number = ahead or counters.allocate(connection, "REPORT", day)
            moved = session_writes.settle_first_report(
                connection, settlement.first_report(task, day, number)
            )
            if moved is None:
                raise _NotAtOnce  # rolls back the number SQLite allocated above
    except (_NotAtOnce, DuplicateKey):
        return None
    return moved


def write_in(connection: Connection, services: Services, settlement: Settlement) -> Task:
    """The REPORT, the move and the attempt's end, in the caller's fenced transaction (which
    recorded the return)."""
    current = tasks.get_for_update(connection, settlement.attempt.task_id)
    assert current is not None  # fenced: the row exists and is ours
    written = write_report_in(
        connection,
        services,
        current,
        settlement.request,
        attempt_id=settlement.attempt.attempt_id,
        locked=True,
    )
    moved = lifecycle.apply(connection, current, settlement.move(written.report.report_id))
    settlement.end.write(connection, settlement.attempt)
    return moved


class _NotAtOnce(Exception):
    """The one-write settle did not apply; roll back whatever it began."""
