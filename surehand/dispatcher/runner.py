"""Running one session: claim -> lease -> heartbeat -> agent -> record return -> settle.

Order matters. The claim (store) comes first so that a duplicate message does nothing; the
lease (Redis) second, as the liveness signal the reconciler watches; the agent's return is
recorded before the REPORT so that a crash in between is reconciled from records, never re-run.

How an attempt that does not settle is told apart and ended (an agent failure or an
interruption): :mod:`surehand.dispatcher.session_exits`; the late write of a session that lost
its lease: :mod:`surehand.dispatcher.late_writes`; the agent's port:
:mod:`surehand.dispatcher.agent_port`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from surehand import metrics
from surehand.agents.context import SessionContext
from surehand.agents.quotas import require_free_space
from surehand.agents.registry import AgentRegistry
from surehand.crashpoints import CrashPoint, crash_point
from surehand.dispatcher import sessions
from surehand.dispatcher.agent_port import AgentPort
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import after_done
from surehand.dispatcher.late_writes import lease_lost
from surehand.dispatcher.session_exits import (
    SessionOutcome,
    fail,
    interrupt,
    interruption_in,
    outcome_of,
    session_error,
    stopped,
)
from surehand.dispatcher.sessions import Session
from surehand.dispatcher.stops import StopWatch, role_time_limits
from surehand.errors import (
    AgentError,
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
from surehand.model import case_id_for
from surehand.queue.heartbeat import Heartbeat
from surehand.queue.leases import LeaseStore

log = logging.getLogger(__name__)

# How an agent handler's effects are observed unless it says otherwise (``effects_observed``):
# a Python agent's every effect goes through ``ctx.operation``.
OBSERVED_PYTHON = "python"


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


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
            outcome = interrupt(session, session_error(error))
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
            return outcome_of(session, "stale", stale)
        return outcome_of(session, "lease_busy")

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
            return fail(session, missing)
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
            return outcome_of(session, "stale", error)
        except Exception as error:
            if _waiting(context):
                return self._waiting(session)
            if context.stopped is not None and context.stopped[0] == "stale_owner":
                return outcome_of(session, "stale", error)  # its tools were fenced: stopped
            return self._raised(session, error)
        if _waiting(context):
            return self._waiting(session)  # its attempt ended in the store already
        if session.stop_cause is not None:
            return stopped(session, returned=result)
        if session.cancelled.is_set():
            return self._lease_lost(session, LeaseLost("lease lost; not settling"))
        if session.interruption is not None:
            # The agent caught the port's error and returned anyway: what it could not record
            # is unknown, so the return is not settled.
            return interrupt(session, session.interruption)
        self._record_details(session)
        return self._settle(session, result, to_review=spec.review)

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

    def _settle(self, session: Session, result: Any, *, to_review: bool) -> SessionOutcome:
        try:
            task = session.settle(result, to_review=to_review)  # crash point after_return
        except StaleOwner as error:
            return outcome_of(session, "stale", error)
        except SessionInterrupted as interrupted:
            return interrupt(session, interrupted, returned=result)
        except EffectLeftOpen as left_open:  # not a clean return: held for review
            return fail(session, left_open)
        except ValidationFailed as invalid:  # the agent's result is no valid REPORT
            session.details["refused"] = "invalid_report"  # no blip: never retried
            return fail(
                session, AgentError(f"the agent's result is no valid REPORT ({invalid.message})")
            )
        if session.may_release:
            after_done(self.services, task)  # the dependants it released
        return SessionOutcome(session.task_id, "settled", session.attempt.number, task.bucket.value)

    def _raised(self, session: Session, error: Exception) -> SessionOutcome:
        """The handler raised: a stop, a lost lease, an interruption, or the agent's own
        failure."""
        if session.stop_cause is not None:
            return stopped(session)
        if session.cancelled.is_set():
            log.warning("agent for %s stopped after its lease was lost: %s", session.task_id, error)
            return self._lease_lost(session, error)
        interrupted = session.interruption or interruption_in(error)
        if interrupted is not None:
            return interrupt(session, interrupted)
        return fail(session, error)

    def _lease_lost(self, session: Session, error: BaseException) -> SessionOutcome:
        """The agent stopped after its lease was lost: submit the end of its attempt late."""
        return lease_lost(
            session, error, lease_ttl_seconds=self.services.settings.lease_ttl_seconds
        )
