"""The late write of a session that lost its lease: the end of its attempt, submitted once its
agent stopped, fenced by its epoch.

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

import logging
import time

from surehand.dispatcher.session_exits import SessionOutcome, outcome_of
from surehand.dispatcher.sessions import Session
from surehand.errors import SessionInterrupted, StaleOwner, StoreUnavailable
from surehand.model import AttemptCause

log = logging.getLogger(__name__)

# How long a session that lost its lease keeps trying to submit the end of its attempt while
# the store is unreachable (a partitioned worker): long enough for a network to come back and
# the pool to replace its dead connections, never forever.
LATE_WRITE_MIN_SECONDS = 60.0
LATE_WRITE_TTLS = 4
LATE_WRITE_MAX_DELAY = 5.0


def late_write_budget(lease_ttl_seconds: float) -> float:
    """Seconds a session that lost its lease keeps submitting the end of its attempt while the
    store is unreachable: four lease TTLs, at least a minute."""
    return max(LATE_WRITE_MIN_SECONDS, LATE_WRITE_TTLS * lease_ttl_seconds)


def lease_lost(
    session: Session, error: BaseException, *, lease_ttl_seconds: float
) -> SessionOutcome:
    """The agent stopped after the lease was lost: submit the end of the attempt to the
    store with its epoch (see the module docstring), repeated while the store is
    unreachable, within :func:`late_write_budget`. ``stale`` when the store fenced it."""
    refused = f"; refused after the loss: {', '.join(session.refused_late)}"
    interrupted = SessionInterrupted(
        f"the session of {session.task_id} lost its lease ({error}); its agent stopped "
        f"without settling{refused if session.refused_late else ''}",
        cause=AttemptCause.LEASE_LOST.value,
    )
    deadline = time.monotonic() + late_write_budget(lease_ttl_seconds)
    delay, repeat = 0.1, False
    while True:
        try:
            session.interrupt(interrupted, repeat=repeat)
        except StaleOwner as stale:  # a successor owns the TASK: fenced and recorded
            return outcome_of(session, "stale", stale)
        except StoreUnavailable as unreachable:
            if time.monotonic() + delay > deadline:
                log.error(
                    "could not submit the end of lost attempt %s of %s (%s); the "
                    "reconciler judges it by its lease",
                    session.attempt.number,
                    session.task_id,
                    unreachable,
                )
                return outcome_of(session, "lease_lost", error)
            time.sleep(delay)
            delay, repeat = min(delay * 2, LATE_WRITE_MAX_DELAY), True
        else:
            return outcome_of(session, "lease_lost", error)
