"""The reconciler: finds lost sessions, opens their cases, and keeps admissions moving.

One pass costs O(running attempts + open cases), not O(all TASKs): running attempts come from a
partial index in pages, and their leases are read with one ``MGET`` per page. A missing lease is
first only *suspected* (``lease_missing_since``); the attempt is marked ``SESSION_LOST`` once the
lease has stayed missing for the grace window, which is kept above the heartbeat interval so a
Redis restart (which heartbeats repair) never produces a false loss. If Redis cannot be reached,
no lease is judged at all. Two reconcilers at once converge: every step is a compare-and-set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection

from surehand import metrics
from surehand.dispatcher import diagnostics, dispatch
from surehand.dispatcher.recovery import Recovery
from surehand.errors import LeaseUnavailable, StaleDecision
from surehand.model import Admission, Attempt, AttemptState, CaseState, InterruptionCase
from surehand.store import attempts, cases, tasks

log = logging.getLogger(__name__)

PAGE = 1000
RECONCILER = "reconciler"


@dataclass
class PassReport:
    """What one reconciler pass saw and did."""

    running: int = 0
    live: int = 0
    suspected: int = 0
    lost: int = 0
    admissions: dict[str, int] = field(default_factory=dict)
    republished: int = 0
    stalled_receipts: int = 0
    redis_ok: bool = True
    held: list[dict[str, object]] = field(default_factory=list)  # cases held in this pass
    seconds: float = 0.0
    next_due_seconds: float | None = None  # when a suspect's grace runs out, if sooner

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Reconciler:
    """Runs reconciliation passes; safe to run in several processes at once."""

    def __init__(self, recovery: Recovery) -> None:
        self.recovery = recovery
        self.services = recovery.services
        settings = self.services.settings
        # Never judge a lease gone before a heartbeat could have restored it.
        self.grace = timedelta(
            seconds=max(settings.lost_grace_seconds, settings.heartbeat_seconds * 1.5)
        )

    def run_once(self) -> PassReport:
        started = time.perf_counter()
        report = PassReport()
        self._scan_running(report)
        self._advance_cases(report)
        report.republished += dispatch.sweep(self.services)
        report.stalled_receipts = diagnostics.count_stalled(self.services)
        report.seconds = round(time.perf_counter() - started, 6)
        metrics.observe_pass(report.seconds, report.lost, report.admissions)
        return report

    # -- running attempts ---------------------------------------------------------------------

    def _scan_running(self, report: PassReport) -> None:
        after = ""
        while True:
            with self.services.store.snapshot() as connection:
                page = attempts.running(connection, limit=PAGE, after=after)
            if not page:
                return
            report.running += len(page)
            if not self._check_page(page, report):
                return
            after = page[-1].attempt_id

    def _check_page(self, page: Sequence[Attempt], report: PassReport) -> bool:
        try:
            holders = self.recovery.admitter.leases.holders([a.task_id for a in page])
        except LeaseUnavailable:
            log.warning("Redis unreachable: no lease is judged in this pass")
            report.redis_ok = False
            return False
        live = [a for a in page if holders.get(a.task_id) == a.attempt_id]
        missing = [a for a in page if holders.get(a.task_id) != a.attempt_id]
        report.live += len(live)
        now = self.services.clock.now()
        with self.services.store.transaction() as connection:
            attempts.clear_lease_missing(
                connection, [a.attempt_id for a in live if a.lease_missing_since is not None]
            )
            since = {
                a.attempt_id: attempts.mark_lease_missing(connection, a.attempt_id, now)
                for a in missing
            }
        for attempt in missing:
            self._judge(attempt, since[attempt.attempt_id], now, report)
        return True

    def _judge(self, attempt: Attempt, since: datetime, now: datetime, report: PassReport) -> None:
        due = since + self.grace
        if now < due:
            report.suspected += 1
            wait = (due - now).total_seconds()
            report.next_due_seconds = min(report.next_due_seconds or wait, wait)
            return
        case = self.recovery.lose(attempt, state=AttemptState.SESSION_LOST, by=RECONCILER)
        if case is not None:
            report.lost += 1
            self._count(case, report)

    # -- open cases ---------------------------------------------------------------------------

    def _advance_cases(self, report: PassReport) -> None:
        """Re-admit undecided or stale cases and (re)publish admitted successors."""
        with self.services.store.snapshot() as connection:
            pending = cases.listing(connection, state=CaseState.OPEN, limit=10_000)
            revisions = {c.task_id: _revision(connection, c.task_id) for c in pending}
        for case in pending:
            if case.admission is Admission.HOLD_FOR_REVIEW:
                continue  # only an approver's review releases a hold
            if self._needs_decision(case, revisions.get(case.task_id)):
                case = self._readmit(case, report)
            if case.admission is Admission.REEXECUTE and case.successor_attempt_id is None:
                report.republished += dispatch.publish_successor(self.services, case.task_id)

    @staticmethod
    def _needs_decision(case: InterruptionCase, revision: int | None) -> bool:
        if case.admission in (None, Admission.NOT_ADMITTED):
            return True
        return case.admission is Admission.REEXECUTE and case.revision_at_evaluation != revision

    def _readmit(self, case: InterruptionCase, report: PassReport) -> InterruptionCase:
        try:
            decided = self.recovery.admitter.admit(case.case_id, decided_by=RECONCILER)
        except StaleDecision:
            return case  # the TASK moved during evaluation; the next pass decides again
        self._count(decided, report)
        return decided

    @staticmethod
    def _count(case: InterruptionCase, report: PassReport) -> None:
        key = case.admission.value if case.admission else "pending"
        report.admissions[key] = report.admissions.get(key, 0) + 1
        if case.admission is Admission.HOLD_FOR_REVIEW:
            # Named in the pass result so the Celery side can show the hold (hold notices).
            report.held.append(
                {
                    "task_id": case.task_id,
                    "case_id": case.case_id,
                    "attempt": case.interrupted_epoch,
                }
            )


def _revision(connection: Connection, task_id: str) -> int | None:
    task = tasks.get(connection, task_id)
    return task.revision if task else None


def reconcile_loop(reconciler: Reconciler, stop: threading.Event, interval: float) -> None:
    """Run passes until ``stop`` is set, waking early when a suspect's grace runs out."""
    while not stop.is_set():
        try:
            report = reconciler.run_once()
        except Exception:
            log.exception("reconciler pass failed; retrying next interval")
            wait = interval
        else:
            wait = min(interval, report.next_due_seconds or interval)
        stop.wait(max(wait, 0.05))
