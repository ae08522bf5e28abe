"""Running one session: claim -> lease -> heartbeat -> agent -> record return -> settle.

Order matters. The claim (store) comes first so that a duplicate message does nothing; the
lease (Redis) second, as the liveness signal the reconciler watches; the agent's return is
recorded before the REPORT so that a crash in between is reconciled from records, never re-run.

An attempt ends by one of two kinds of cause (DESIGN.md section 5). The agent's own: it
returned (settle) or raised (``failed``, held for its approver). Or the runtime's: the session
could not record or renew its work (the store unavailable past the writes' bounded retries, the
lease lost). Those are *interruptions*: they never settle the TASK, and they are told from an
agent failure by the exception itself (a ``SessionInterrupted`` the port raised, or a store or
Redis error, anywhere in the exception's cause chain) and by the mark the port leaves on the
session, which holds even when the agent caught the error and carried on.

A lost lease is the heartbeat's judgement about liveness, never about ownership: that belongs
to the store. So a session that lost its lease does not simply drop its last write. Once its
agent has stopped, it submits the end of its attempt (``interrupt``, cause ``lease_lost``,
never a settle) with its own epoch, repeated while the store is unreachable for a bounded
time (:func:`late_write_budget`). If a successor took over meanwhile, the store fences the
write and records a ``stale_owner_fenced`` event: the evidence that the old owner came back
and was stopped. If the store still counts the attempt as running (no reconciler judged it
yet), the write ends it interrupted and opens its case, which admission decides like any
lost session's.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from surehand import metrics
from surehand.agents.context import SessionContext
from surehand.agents.quotas import require_free_space
from surehand.agents.registry import AgentRegistry
from surehand.crashpoints import CrashPoint, crash_point
from surehand.dispatcher import delegation, sessions
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import after_done
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.dispatcher.stops import StopWatch, role_time_limits
from surehand.errors import (
    AgentError,
    AgentOutputRefused,
    EffectLeftOpen,
    LeaseLost,
    LeaseUnavailable,
    NoAgentForRole,
    SessionInterrupted,
    StaleOwner,
    StoreUnavailable,
    SurehandError,
    ValidationFailed,
)
from surehand.model import (
    AttemptCause,
    ReportStatus,
    RetryPolicy,
    WriteReportResult,
    WriteTaskResult,
    case_id_for,
)
from surehand.queue.heartbeat import Heartbeat
from surehand.queue.leases import LeaseStore

log = logging.getLogger(__name__)

# How long a session that lost its lease keeps trying to submit the end of its attempt while
# the store is unreachable (a partitioned worker): long enough for a network to come back and
# the pool to replace its dead connections, never forever.
LATE_WRITE_MIN_SECONDS = 60.0
LATE_WRITE_TTLS = 4
LATE_WRITE_MAX_DELAY = 5.0
# How an agent handler's effects are observed unless it says otherwise (``effects_observed``):
# a Python agent's every effect goes through ``ctx.operation``.
OBSERVED_PYTHON = "python"
# Failures a retry would only repeat (``retry.refused``): recorded as ``details["refused"]``.
NOT_TRANSIENT = (AgentOutputRefused, NoAgentForRole)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


@dataclass(frozen=True)
class SessionOutcome:
    """What a session run ended with (also the Celery task's return value, seen in Flower)."""

    task_id: str
    outcome: str  # not_claimed | settled | failed | interrupted | lease_lost | stale | lease_busy
    attempt: int | None = None
    bucket: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class AgentPort:
    """Implements SessionPort for one session (the agent's view of the service layer): what
    the runner hands an agent as ``SessionContext.port``. Public so that a caller driving a
    claimed session's agent calls itself (the protocol explorers, ``tests/explore_protocol.py``)
    goes through the same checks as an agent does.

    Once the session lost its lease, the port refuses new operations and reports with
    ``LeaseLost``: that is how an agent that never looks at ``ctx.cancelled`` is stopped
    before its next side effect, not after it.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    def _check_live(self, write: str) -> None:
        if self.session.cancelled.is_set():
            self.session.refuse_late(write)
            stopped = self.session.stop_cause
            what = f"stopped ({stopped[1]})" if stopped is not None else "lost its lease"
            raise LeaseLost(
                f"{write} refused: the session of {self.session.task_id} {what}",
                task_id=self.session.task_id,
                attempt_id=self.session.attempt.attempt_id,
            )

    def operation(
        self,
        name: str,
        args: Mapping[str, Any],
        effect: Callable[[], Any],
        *,
        idempotency_key: str | None,
        retry_policy: RetryPolicy,
        probe: str | None,
        probe_args: Mapping[str, Any] | None = None,
    ) -> Any:
        self._check_live(f"operation {name!r}")
        return run_operation(
            self.session,
            name,
            args,
            effect,
            idempotency_key=idempotency_key,
            retry_policy=retry_policy,
            probe=probe,
            probe_args=probe_args,
        )

    def report(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult:
        self._check_live("report")
        return self.session.report(body, status, submission_id)

    def delegate(self, arguments: Mapping[str, Any]) -> WriteTaskResult:
        self._check_live("delegate")
        return delegation.delegate(self.session, arguments)

    def wait_for(self, children: Sequence[str]) -> dict[str, Any]:
        self._check_live("wait_for")
        return delegation.wait_for(self.session, children)

    def children(self) -> list[dict[str, Any]]:
        return delegation.children(self.session)


def _waiting(context: SessionContext) -> bool:
    """Whether the agent ended its attempt to wait for its children (ctx or MCP wait_for)."""
    return context.stopped is not None and context.stopped[0] == "waiting"


class SessionRunner:
    """Runs sessions for TASKs with the registered agents, under Redis leases."""

    def __init__(
        self,
        services: Services,
        registry: AgentRegistry,
        leases: LeaseStore,
        *,
        admit: Callable[[str], object] | None = None,
    ) -> None:
        self.services = services
        self.registry = registry
        self.leases = leases
        # Runs admission on a stopped session's case at once (else the reconciler's next pass).
        self.admit = admit
        role_time_limits(services.settings.role_time_limits)  # ConfigError here, not mid-session
        self.stops = StopWatch(services)

    @property
    def ttl_ms(self) -> int:
        return int(self.services.settings.lease_ttl_seconds * 1000)

    def run(self, task_id: str, *, message_id: str | None = None) -> SessionOutcome:
        """Claim and run one TASK; a TASK that is not claimable is acknowledged and skipped.
        ``NoSpaceForSessions`` (nothing claimed, the TASK left in inbox) while the work
        directory's file system is below the free space this worker keeps."""
        require_free_space(self.services.settings)
        session = self._claim_retrying(task_id, message_id)
        if session is None:
            return SessionOutcome(task_id, "not_claimed")
        crash_point(CrashPoint.SESSION_AFTER_CLAIM)
        return self.run_claimed(session)

    def _claim_retrying(self, task_id: str, message_id: str | None) -> Session | None:
        """The claim, repeated after ``StoreUnavailable`` with a session write's backoff
        (``sessions.STORE_RETRY_DELAYS``); raises it when the retries run out.

        Pooled connections are not pinged before use, and a database restart kills them all:
        one retry is not enough. A repeat after a claim that committed unseen finds nothing
        to claim; the attempt that claim made never takes its lease, so the reconciler judges
        it lost and admits a successor on its (empty) effect facts.
        """
        for delay in (*sessions.STORE_RETRY_DELAYS, None):
            try:
                return self._claim(task_id, message_id)
            except StoreUnavailable:
                if delay is None:
                    raise
                log.warning("store unavailable while claiming %s; repeating the claim", task_id)
                time.sleep(delay)
        raise AssertionError("unreachable: the last try returns or raises")

    def _claim(self, task_id: str, message_id: str | None) -> Session | None:
        return claim(self.services, task_id, worker=worker_identity(), message_id=message_id)

    def run_claimed(self, session: Session) -> SessionOutcome:
        """Run an attempt that is already claimed (a fresh claim or an admitted successor)."""
        generation = self._acquire(session)
        if generation is None:
            return self._roll_back(session)
        heartbeat = Heartbeat(
            self.leases,
            session.task_id,
            session.attempt.attempt_id,
            self.ttl_ms,
            interval=self.services.settings.heartbeat_seconds,
            on_lost=lambda _lost: session.cancelled.set(),
            generation=generation,
            # The renewing thread starts when the first renewal is due: a session that ends
            # sooner never creates one. Loss is still detected at the same renewal times.
            defer=self.services.settings.heartbeat_seconds,
        )
        heartbeat.start()
        self.stops.watch(session)  # cancel requests and the time limit
        try:
            outcome = self._run_agent(session)
        except Exception as error:  # surehand's own code failed: never leave it running
            outcome = self._interrupt(session, session_error(error))
        finally:
            self.stops.forget(session)
            heartbeat.stop()
            metrics.observe_renew_failures(heartbeat.renew_failures)
            stopped_on_purpose = session.stop_cause is not None or session.waiting
            if not session.cancelled.is_set() or stopped_on_purpose:
                self._release(session)  # a session stopped on purpose still holds its lease
        return self._admit_stopped(session, outcome)

    def _admit_stopped(self, session: Session, outcome: SessionOutcome) -> SessionOutcome:
        """Admission on the case of a session stopped on purpose, once its lease is released
        (a live lease would keep its owner): the TASK is archived or held at once."""
        if session.stop_cause is None or self.admit is None:
            return outcome
        if outcome.outcome != session.stop_cause[0].value:
            return outcome  # it ended otherwise (fenced, or the end was not recorded)
        try:
            self.admit(case_id_for(session.attempt))
        except SurehandError as error:
            log.warning("admission of stopped %s deferred (%s)", session.task_id, error)
        return outcome

    def _stopped(self, session: Session, **returned: Any) -> SessionOutcome:
        """The session was stopped on purpose (cancelled, out of time): end its attempt
        interrupted with that cause (never settled), for admission to decide."""
        assert session.stop_cause is not None
        cause, why = session.stop_cause
        interrupted = SessionInterrupted(
            f"{why}; the session of {session.task_id} was stopped", cause=cause.value
        )
        ended = self._interrupt(session, interrupted, **returned)
        if ended.outcome != "interrupted":
            return ended
        return dataclasses.replace(ended, outcome=cause.value)

    def _acquire(self, session: Session) -> str | None:
        """SET NX PX the lease; wait out at most one TTL for a dead predecessor's key.

        Returns the dataset generation marker read in the same round trip (for the heartbeat),
        or None if the lease stayed held by another attempt.
        """
        deadline = time.monotonic() + self.services.settings.lease_ttl_seconds
        task_id, attempt_id = session.task_id, session.attempt.attempt_id
        while time.monotonic() < deadline:
            try:
                acquired, generation = self.leases.acquire_with_generation(
                    task_id, attempt_id, self.ttl_ms
                )
                if acquired:
                    return generation
            except LeaseUnavailable:
                log.warning("Redis unavailable while leasing %s; retrying", task_id)
            time.sleep(0.2)
        log.error("lease:%s stayed held by another attempt; leaving it", task_id)
        return None

    def _roll_back(self, session: Session) -> SessionOutcome:
        try:
            session.rollback(
                f"lease:{session.task_id} stayed held by another attempt; no work started"
            )
        except StaleOwner as stale:
            return self._outcome(session, "stale", stale)
        return self._outcome(session, "lease_busy")

    def _release(self, session: Session) -> None:
        try:
            self.leases.release(session.task_id, session.attempt.attempt_id)
        except LeaseUnavailable:
            log.warning("could not release lease:%s; it expires by itself", session.task_id)

    def _run_agent(self, session: Session) -> SessionOutcome:
        try:
            spec = self.registry.get(session.task.fields.recipient)
        except NoAgentForRole as missing:
            # Recorded as a failed attempt (visible, not retried), never left for the reconciler
            # to mistake for a lost session and re-run in a loop.
            return self._fail(session, missing)
        context = SessionContext(
            task=session.task,
            attempt=session.attempt,
            port=AgentPort(session),
            cancelled=session.cancelled,
            work_dir=self.services.settings.work_dir / session.attempt.attempt_id,
            services=self.services,
        )
        context.details = session.details  # one dict: what the agent's runner notes is kept
        observed = getattr(spec.handler, "effects_observed", OBSERVED_PYTHON)
        if observed:
            context.note(observed=observed)
        try:
            result = self._handled(spec.handler, context)
        except StaleOwner as error:
            return self._outcome(session, "stale", error)
        except Exception as error:
            if _waiting(context):
                return self._waiting(session)
            if context.stopped is not None and context.stopped[0] == "stale_owner":
                return self._outcome(session, "stale", error)  # its tools were fenced: stopped
            return self._raised(session, error)
        if _waiting(context):
            return self._waiting(session)  # its attempt ended in the store already
        if session.stop_cause is not None:
            return self._stopped(session, returned=result)
        if session.cancelled.is_set():
            return self._lease_lost(session, LeaseLost("lease lost; not settling"))
        if session.interruption is not None:
            # The agent caught the port's error and returned anyway: what it could not record
            # is unknown, so the return is not settled.
            return self._interrupt(session, session.interruption)
        self._record_details(session)
        return self._settle(session, result, review=spec.review)

    def _waiting(self, session: Session) -> SessionOutcome:
        """The agent waits for its children: its attempt ended in the store (wait_for), the
        lease is released and the worker slot is free until they are done."""
        session.waiting = True
        return SessionOutcome(session.task_id, "waiting", session.attempt.number, "inbox")

    @staticmethod
    def _handled(handler: Callable[[SessionContext], Any], context: SessionContext) -> Any:
        """The handler's result; what its CLI reported spending is counted however it ends."""
        try:
            return handler(context)
        finally:
            metrics.observe_agent_usage(context.task.fields.recipient, context.details.get("usage"))

    @staticmethod
    def _record_details(session: Session) -> None:
        """Keep a returned agent's output and accounting (a settle does not carry them); a
        Python agent's ``observed`` alone matters only if it fails, and costs no write."""
        if set(session.details) <= {"observed"}:
            return
        try:
            session.record_details()
        except (StaleOwner, StoreUnavailable) as error:
            log.warning("the details of %s were not recorded: %s", session.task_id, error)

    def _settle(self, session: Session, result: Any, *, review: bool) -> SessionOutcome:
        try:
            task = session.settle_returned(result, review=review)  # crash point after_return
        except StaleOwner as error:
            return self._outcome(session, "stale", error)
        except SessionInterrupted as interrupted:
            return self._interrupt(session, interrupted, returned=result)
        except EffectLeftOpen as left_open:  # not a clean return: held for review
            return self._fail(session, left_open)
        except ValidationFailed as invalid:  # the agent's result is no valid REPORT
            session.details["refused"] = "invalid_report"  # no blip: never retried
            return self._fail(
                session, AgentError(f"the agent's result is no valid REPORT ({invalid.message})")
            )
        if session.may_release:
            after_done(self.services, task)  # the dependants it released
        return SessionOutcome(session.task_id, "settled", session.attempt.number, task.bucket.value)

    def _raised(self, session: Session, error: Exception) -> SessionOutcome:
        """The handler raised: a stop, a lost lease, an interruption, or the agent's own
        failure."""
        if session.stop_cause is not None:
            return self._stopped(session)
        if session.cancelled.is_set():
            log.warning("agent for %s stopped after its lease was lost: %s", session.task_id, error)
            return self._lease_lost(session, error)
        interrupted = session.interruption or interruption_in(error)
        if interrupted is not None:
            return self._interrupt(session, interrupted)
        return self._fail(session, error)

    def _lease_lost(self, session: Session, error: BaseException) -> SessionOutcome:
        """The agent stopped after the lease was lost: submit the end of the attempt to the
        store with its epoch (see the module docstring), repeated while the store is
        unreachable, within :func:`late_write_budget`. ``stale`` when the store fenced it."""
        refused = f"; refused after the loss: {', '.join(session.refused_late)}"
        interrupted = SessionInterrupted(
            f"the session of {session.task_id} lost its lease ({error}); its agent stopped "
            f"without settling{refused if session.refused_late else ''}",
            cause=AttemptCause.LEASE_LOST.value,
        )
        deadline = time.monotonic() + late_write_budget(self.services.settings.lease_ttl_seconds)
        delay, repeat = 0.1, False
        while True:
            try:
                session.interrupt(interrupted, repeat=repeat)
            except StaleOwner as stale:  # a successor owns the TASK: fenced and recorded
                return self._outcome(session, "stale", stale)
            except StoreUnavailable as unreachable:
                if time.monotonic() + delay > deadline:
                    log.error(
                        "could not submit the end of lost attempt %s of %s (%s); the "
                        "reconciler judges it by its lease",
                        session.attempt.number,
                        session.task_id,
                        unreachable,
                    )
                    return self._outcome(session, "lease_lost", error)
                time.sleep(delay)
                delay, repeat = min(delay * 2, LATE_WRITE_MAX_DELAY), True
            else:
                return self._outcome(session, "lease_lost", error)

    def _fail(self, session: Session, error: Exception) -> SessionOutcome:
        log.exception("agent for %s raised", session.task_id)
        if isinstance(error, NOT_TRANSIENT):  # its output refused, or no agent: never retried
            session.details["refused"] = type(error).__name__
        try:
            session.fail(error)
        except StaleOwner as stale:
            return self._outcome(session, "stale", stale)
        except SessionInterrupted as interrupted:
            return self._left_running(session, interrupted)
        return self._outcome(session, "failed", error)

    def _interrupt(
        self, session: Session, interrupted: SessionInterrupted, **returned: Any
    ) -> SessionOutcome:
        """End the attempt ``interrupted`` with its cause (and the agent's result if it
        ``returned``) and open its case; admission (the reconciler's next pass) decides from
        the effect facts. Never settles the TASK."""
        log.error("session of %s interrupted: %s", session.task_id, interrupted)
        try:
            session.interrupt(interrupted, **returned)
        except StaleOwner as stale:
            return self._outcome(session, "stale", stale)
        except Exception:  # the store cannot take the end either (or a bug in ending it)
            log.exception("could not end attempt %s of %s", session.attempt.number, session.task_id)
            return self._left_running(session, interrupted)
        return self._outcome(session, "interrupted", interrupted)

    def _left_running(self, session: Session, interrupted: SessionInterrupted) -> SessionOutcome:
        # The store cannot take the end either. The attempt stays running and its lease is
        # released as the session ends (the session is over: nothing of it runs any more), so
        # the reconciler marks it SESSION_LOST after its grace and opens its one case.
        log.error(
            "could not record the end of attempt %s of %s; the reconciler will find it",
            session.attempt.number,
            session.task_id,
        )
        return self._outcome(session, "interrupted", interrupted)

    @staticmethod
    def _outcome(
        session: Session, outcome: str, error: BaseException | None = None
    ) -> SessionOutcome:
        return SessionOutcome(
            session.task_id,
            outcome,
            session.attempt.number,
            error=f"{type(error).__name__}: {error}" if error else None,
        )


# Runtime errors that interrupt a session when they reach the runner (through the agent or
# not), with the cause each one records.
_RUNTIME_ERRORS: tuple[tuple[type[Exception], AttemptCause], ...] = (
    (StoreUnavailable, AttemptCause.STORE_UNAVAILABLE),
    (LeaseUnavailable, AttemptCause.REDIS_UNAVAILABLE),
    (LeaseLost, AttemptCause.LEASE_LOST),
)


def late_write_budget(lease_ttl_seconds: float) -> float:
    """Seconds a session that lost its lease keeps submitting the end of its attempt while the
    store is unreachable: four lease TTLs, at least a minute."""
    return max(LATE_WRITE_MIN_SECONDS, LATE_WRITE_TTLS * lease_ttl_seconds)


def session_error(error: Exception) -> SessionInterrupted:
    """The interruption for an error of surehand's own session code (not the agent's): the
    attempt ends ``interrupted`` with cause ``session_error`` and goes through admission."""
    interrupted = interruption_in(error)
    if interrupted is not None:
        return interrupted
    log.error("session code failed", exc_info=error)
    return SessionInterrupted(
        f"surehand's session code failed ({type(error).__name__}: {error}); the attempt is "
        "interrupted and admission decides from the recorded effect facts",
        cause=AttemptCause.SESSION_ERROR.value,
    )


def interruption_in(error: BaseException) -> SessionInterrupted | None:
    """The interruption an exception carries, if the runtime (not the agent) caused it: a
    ``SessionInterrupted`` from the port, or a store/Redis/lease error, found anywhere in its
    cause or context chain (an agent that wrapped the port's error in its own still ends
    interrupted, not failed)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, SessionInterrupted):
            return current
        for kind, cause in _RUNTIME_ERRORS:
            if isinstance(current, kind):
                return SessionInterrupted(
                    f"the session could not record or renew its work: {current}",
                    cause=cause.value,
                )
        current = _next_in_chain(current)
    return None


def _next_in_chain(error: BaseException) -> BaseException | None:
    # As tracebacks show it: the explicit cause, else the implicit context unless the agent
    # hid it on purpose (``raise ... from None``).
    if error.__cause__ is not None:
        return error.__cause__
    return None if error.__suppress_context__ else error.__context__
