"""The reconciler: finds lost sessions, opens their cases, and keeps admissions moving.

One pass costs O(running attempts + open cases), not O(all TASKs): running attempts come from a
partial index in pages, and their leases are read with one ``MGET`` per page. A missing lease is
first only *suspected* (``lease_missing_since``); the attempt is marked ``SESSION_LOST`` once the
lease has stayed missing for the grace window, which is kept above the heartbeat interval so a
Redis restart (which heartbeats repair) never produces a false loss. If Redis cannot be reached,
no lease is judged at all. Two reconcilers at once converge: every step is a compare-and-set.

Every pass also checks the invariant of DESIGN.md section 5 -- no TASK sits in ``active``
without a running attempt, an open case or a hold -- as a safety net under the paths that keep
it (a session that fails or is interrupted opens its case with its end): a TASK found without
any of the three gets a case for its last attempt, admitted like any other. The check reads a
partial index of active, unheld TASKs, so it costs O(TASKs in flight). A TASK waiting for rework
(its last attempt settled) or taken by hand (no attempt) is not stranded: it has its own path.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime

from sqlalchemy import Connection

from surehand import metrics
from surehand.dispatcher import cascades, dispatch
from surehand.dispatcher.recovery import Recovery, loss_grace
from surehand.errors import LeaseUnavailable, StaleDecision
from surehand.model import Admission, AttemptState, CaseState, InterruptionCase
from surehand.store import attempts, cases, tasks
from surehand.store.attempts import RunningLease

log = logging.getLogger(__name__)

PAGE = 1000
STRANDED_PER_PASS = 100  # stranded TASKs rescued per pass; the rest in the next passes
RECONCILER = "reconciler"
_UNSEEN = "\0unseen"  # no generation read yet by this reconciler
# One page's suspicion changes: attempts whose lease is back, attempts newly missing, and when.
_Suspicions = tuple[list[str], list[str], datetime]


@dataclass
class PassReport:
    """What one reconciler pass saw and did."""

    running: int = 0
    live: int = 0
    suspected: int = 0
    lost: int = 0
    admissions: dict[str, int] = field(default_factory=dict)
    reported_live: int = 0  # lease gone past grace, but a worker reports the job running
    stranded: int = 0  # TASKs found in active without a running attempt, open case or hold
    republished: int = 0
    retries_waiting: int = 0  # successors a retry policy admitted, waiting for their backoff
    cascaded: int = 0  # children of cancelled TASKs cancelled by this pass (cascades.finish)
    redis_ok: bool = True
    held: list[dict[str, object]] = field(default_factory=list)  # cases held in this pass
    seconds: float = 0.0
    next_due_seconds: float | None = None  # when a suspect's grace runs out, if sooner

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Reconciler:
    """Runs reconciliation passes; safe to run in several processes at once."""

    def __init__(
        self, recovery: Recovery, *, live_jobs: Callable[[], Collection[str]] | None = None
    ) -> None:
        self.recovery = recovery
        # Asks the workers which TASKs they are running right now (Celery's ``inspect
        # active``); consulted only for attempts whose grace ran out, as a last check.
        self.live_jobs = live_jobs
        self.services = recovery.services
        # Never judge a lease gone before a heartbeat could have restored it.
        self.grace = loss_grace(self.services.settings)
        # Redis outages and restarts seen by this reconciler: a lease that was missing before
        # Redis came back (or lost its data) is judged only from that moment on, because the
        # heartbeats needed Redis to restore it.
        self._generation: str | None = _UNSEEN
        self._outage = False
        self._judge_from: datetime | None = None

    def run_once(self) -> PassReport:
        started = time.perf_counter()
        report = PassReport()
        self._scan_running(report)
        self._rescue_stranded(report)
        self._advance_cases(report)
        report.cascaded = cascades.finish(self.services)
        report.republished += dispatch.sweep(self.services)
        report.seconds = round(time.perf_counter() - started, 6)
        metrics.observe_pass(report.seconds, report.lost, report.admissions)
        self._note_pass(report.seconds)
        if report.held and self.services.notify_hold is not None:
            self.services.notify_hold(report.held)  # so Flower shows the held TASKs
        return report

    def _note_pass(self, seconds: float) -> None:
        """For the console's workers page; a Redis that is down loses only that line."""
        with contextlib.suppress(LeaseUnavailable):
            self.recovery.admitter.leases.record_pass(time.time(), seconds)

    # -- running attempts ---------------------------------------------------------------------

    def _scan_running(self, report: PassReport) -> None:
        """Check every running attempt's lease: one streamed read of the running attempts, one
        ``MGET`` per page; then, outside the read, one write transaction per page whose
        suspicions changed, and the judgement of the attempts whose grace ran out."""
        if not self._check_redis(report):
            return
        due: list[RunningLease] = []
        changes: list[_Suspicions] = []
        complete = self._read_running(report, due, changes)
        # Written after the read is closed: a thread that holds a pooled connection while it
        # waits for another can deadlock a bounded pool (until its timeout) when every other
        # connection is held by a thread doing the same.
        self._write_suspicions(changes)
        if complete:  # Redis failed mid-scan: judge nothing on a partial view
            for running in self._not_reported_live(due, report):
                self._lose(running, report)

    def _read_running(
        self, report: PassReport, due: list[RunningLease], changes: list[_Suspicions]
    ) -> bool:
        """Check the leases of the running attempts, page by page; False if Redis failed."""
        with self.services.store.snapshot() as connection:
            for page in attempts.running_pages(connection, page_size=PAGE):
                report.running += len(page)
                if not self._check_page(page, report, due, changes):
                    return False
        return True

    def _write_suspicions(self, changes: list[_Suspicions]) -> None:
        for back, new, now in changes:
            with self.services.store.transaction() as connection:
                attempts.clear_lease_missing(connection, back)
                attempts.mark_lease_missing(connection, new, now)

    def _not_reported_live(self, due: list[RunningLease], report: PassReport) -> list[RunningLease]:
        """Drop the attempts a worker still reports running: such a job is kept (its own
        heartbeat restores or gives up its lease); if the workers cannot be asked, nothing is
        judged lost in this pass rather than guessing."""
        if not due or self.live_jobs is None:
            return due
        try:
            reported = set(self.live_jobs())
        except Exception:
            log.warning("workers could not be asked which sessions they run; judging later")
            return []
        kept = [running for running in due if running.task_id in reported]
        report.reported_live += len(kept)
        return [running for running in due if running.task_id not in reported]

    def _check_redis(self, report: PassReport) -> bool:
        """Read the dataset generation; note an outage or a Redis that lost its data."""
        try:
            generation = self.recovery.admitter.leases.generation()
        except LeaseUnavailable:
            self._unreachable(report)
            return False
        # A marker minted for the first time is not a restart; a marker lost or replaced is.
        changed = self._generation not in (_UNSEEN, None) and generation != self._generation
        if self._outage or changed:
            self._judge_from = self.services.clock.now()
            log.warning("Redis is back (or lost its data): missing leases are judged from now")
        self._outage = False
        self._generation = generation
        return True

    def _unreachable(self, report: PassReport) -> None:
        log.warning("Redis unreachable: no lease is judged in this pass")
        report.redis_ok = False
        self._outage = True

    def _check_page(
        self,
        page: Sequence[RunningLease],
        report: PassReport,
        due: list[RunningLease],
        changes: list[_Suspicions],
    ) -> bool:
        try:
            holders = self.recovery.admitter.leases.holders([a.task_id for a in page])
        except LeaseUnavailable:
            self._unreachable(report)
            return False
        live = [a for a in page if holders.get(a.task_id) == a.attempt_id]
        missing = [a for a in page if holders.get(a.task_id) != a.attempt_id]
        report.live += len(live)
        now = self.services.clock.now()
        back = [a.attempt_id for a in live if a.lease_missing_since is not None]
        new = [a.attempt_id for a in missing if a.lease_missing_since is None]
        if back or new:
            changes.append((back, new, now))
        for running in missing:
            # A concurrent reconciler may have noted it a moment earlier; using our own
            # ``now`` then only delays the judgement, never hastens it.
            if self._suspect(running.lease_missing_since or now, now, report):
                due.append(running)
        return True

    def _suspect(self, since: datetime, now: datetime, report: PassReport) -> bool:
        """Count a missing lease as suspected; True once its grace has run out."""
        if self._judge_from is not None:
            since = max(since, self._judge_from)
        due = since + self.grace
        if now >= due:
            return True
        report.suspected += 1
        wait = (due - now).total_seconds()
        if report.next_due_seconds is None or wait < report.next_due_seconds:
            report.next_due_seconds = wait
        return False

    def _lose(self, running: RunningLease, report: PassReport) -> None:
        with self.services.store.snapshot() as connection:
            attempt = attempts.get(connection, running.attempt_id)
        if attempt is None or attempt.state is not AttemptState.RUNNING:
            return  # it ended (settled, or lost by a concurrent pass) since it was read
        try:
            case = self.recovery.lose(attempt, state=AttemptState.SESSION_LOST, by=RECONCILER)
        except StaleDecision:
            # The loss and its case are recorded; the TASK changed while admission evaluated
            # it, so the case stays undecided and the next pass decides it on the new revision.
            report.lost += 1
            return
        if case is not None:
            report.lost += 1
            self._count(case, report)

    # -- the safety net ------------------------------------------------------------------------

    def _rescue_stranded(self, report: PassReport) -> None:
        """Open a case for the last attempt of every TASK stranded in ``active`` and admit it
        (by its effect facts; an agent failure is held for its approver)."""
        with self.services.store.snapshot() as connection:
            found = attempts.stranded(connection, limit=STRANDED_PER_PASS)
        for attempt in found:
            log.error(
                "%s sat in active without a running attempt, an open case or a hold (attempt "
                "%s ended %s); opening its case",
                attempt.task_id,
                attempt.number,
                attempt.state.value,
            )
            report.stranded += 1
            try:
                case = self.recovery.open_case(attempt, by=RECONCILER, undecided_only=True)
            except StaleDecision:
                continue  # the case is open; the TASK moved meanwhile: the next pass decides
            self._count(case, report)

    # -- open cases ---------------------------------------------------------------------------

    def _advance_cases(self, report: PassReport) -> None:
        """Re-admit undecided or stale cases and (re)publish admitted successors."""
        with self.services.store.snapshot() as connection:
            listed = cases.listing(connection, state=CaseState.OPEN, limit=10_000)
            # Only an approver's review releases a hold: held cases wait without cost here.
            pending = [c for c in listed if c.admission is not Admission.HOLD_FOR_REVIEW]
            revisions = {c.task_id: _revision(connection, c.task_id) for c in pending}
        for case in pending:
            if self._needs_decision(case, revisions.get(case.task_id)):
                case = self._readmit(case, report)
            if case.admission is not Admission.REEXECUTE or case.successor_attempt_id is not None:
                continue
            if self._retry_due(case, report):
                report.republished += dispatch.publish_successor(self.services, case.task_id)

    def _retry_due(self, case: InterruptionCase, report: PassReport) -> bool:
        """A retry policy's successor is published once its backoff passed (no worker sleeps
        on it); until then the pass notes when to wake."""
        if case.retry_at is None:
            return True
        wait = (case.retry_at - self.services.clock.now()).total_seconds()
        if wait <= 0:
            return True
        report.retries_waiting += 1
        if report.next_due_seconds is None or wait < report.next_due_seconds:
            report.next_due_seconds = wait
        return False

    @staticmethod
    def _needs_decision(case: InterruptionCase, revision: int | None) -> bool:
        if case.admission in (None, Admission.NOT_ADMITTED):
            return True
        return case.admission is Admission.REEXECUTE and case.revision_at_evaluation != revision

    def _readmit(self, case: InterruptionCase, report: PassReport) -> InterruptionCase:
        try:
            decided = self.recovery.admitter.admit(
                case.case_id, decided_by=RECONCILER, seen_decided_at=case.decided_at
            )
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
