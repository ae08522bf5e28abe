"""How a session's attempt ends when it does not settle: the classification of what stopped it
and the write that records that end.

An attempt ends by one of two kinds of cause (DESIGN.md section 5). The agent's own: it
returned (settle) or raised (``failed``, held for its approver). Or the runtime's: the session
could not record or renew its work (the store unavailable past the writes' bounded retries, the
lease lost). Those are *interruptions*: they never settle the TASK, and they are told from an
agent failure by the exception itself (a ``SessionInterrupted`` the port raised, or a store or
Redis error, anywhere in the exception's cause chain) and by the mark the port leaves on the
session, which holds even when the agent caught the error and carried on.

The session run loop that calls these: :mod:`surehand.dispatcher.runner`; the end a session
that lost its lease submits late: :mod:`surehand.dispatcher.late_writes`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from surehand.dispatcher.sessions import Session
from surehand.errors import (
    AgentOutputRefused,
    LeaseLost,
    LeaseUnavailable,
    NoAgentForRole,
    SessionInterrupted,
    StaleOwner,
    StoreUnavailable,
)
from surehand.model import AttemptCause

log = logging.getLogger(__name__)

# Failures a retry would only repeat (``retry.refused``): recorded as ``details["refused"]``.
NOT_TRANSIENT = (AgentOutputRefused, NoAgentForRole)
# Runtime errors that interrupt a session when they reach the runner (through the agent or
# not), with the cause each one records.
_RUNTIME_ERRORS: tuple[tuple[type[Exception], AttemptCause], ...] = (
    (StoreUnavailable, AttemptCause.STORE_UNAVAILABLE),
    (LeaseUnavailable, AttemptCause.REDIS_UNAVAILABLE),
    (LeaseLost, AttemptCause.LEASE_LOST),
)


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


def outcome_of(
    session: Session, outcome: str, error: BaseException | None = None
) -> SessionOutcome:
    """The outcome ``outcome`` of ``session``'s attempt, naming ``error`` if it ended by one."""
    return SessionOutcome(
        session.task_id,
        outcome,
        session.attempt.number,
        error=f"{type(error).__name__}: {error}" if error else None,
    )


def stopped(session: Session, **returned: Any) -> SessionOutcome:
    """The session was stopped on purpose (cancelled, out of time): end its attempt
    interrupted with that cause (never settled), for admission to decide."""
    assert session.stop_cause is not None
    cause, why = session.stop_cause
    interrupted = SessionInterrupted(
        f"{why}; the session of {session.task_id} was stopped", cause=cause.value
    )
    ended = interrupt(session, interrupted, **returned)
    if ended.outcome != "interrupted":
        return ended
    return dataclasses.replace(ended, outcome=cause.value)


def fail(session: Session, error: Exception) -> SessionOutcome:
    """The agent's own failure: end the attempt ``failed`` (its case opens with it)."""
    log.exception("agent for %s raised", session.task_id)
    if isinstance(error, NOT_TRANSIENT):  # its output refused, or no agent: never retried
        session.details["refused"] = type(error).__name__
    try:
        session.fail(error)
    except StaleOwner as stale:
        return outcome_of(session, "stale", stale)
    except SessionInterrupted as interrupted:
        return left_running(session, interrupted)
    return outcome_of(session, "failed", error)


def interrupt(session: Session, interrupted: SessionInterrupted, **returned: Any) -> SessionOutcome:
    """End the attempt ``interrupted`` with its cause (and the agent's result if it
    ``returned``) and open its case; admission (the reconciler's next pass) decides from
    the effect facts. Never settles the TASK."""
    log.error("session of %s interrupted: %s", session.task_id, interrupted)
    try:
        session.interrupt(interrupted, **returned)
    except StaleOwner as stale:
        return outcome_of(session, "stale", stale)
    except Exception:  # the store cannot take the end either (or a bug in ending it)
        log.exception("could not end attempt %s of %s", session.attempt.number, session.task_id)
        return left_running(session, interrupted)
    return outcome_of(session, "interrupted", interrupted)


def left_running(session: Session, interrupted: SessionInterrupted) -> SessionOutcome:
    # The store cannot take the end either. The attempt stays running and its lease is
    # released as the session ends (the session is over: nothing of it runs any more), so
    # the reconciler marks it SESSION_LOST after its grace and opens its one case.
    log.error(
        "could not record the end of attempt %s of %s; the reconciler will find it",
        session.attempt.number,
        session.task_id,
    )
    return outcome_of(session, "interrupted", interrupted)


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
