"""Named crash points for crash-recovery tests: a closed set, declared here.

``SUREHAND_CRASH_AT`` names one or more :class:`CrashPoint` values (comma separated). When
running code reaches a named point, the process kills itself with SIGKILL: no ``finally``
blocks, no atexit handlers, no flushing, exactly like a power cut or an OOM kill. A name that is
not a crash point is a ``ConfigError`` at the first point reached (a typo never silently fails
to fire). Unset (the default), a crash point costs one dictionary lookup. Never set it outside
tests; ``tests/chaos/test_crash_points.py`` checks that every point has a crash test.
"""

from __future__ import annotations

import enum
import functools
import os
import signal

from surehand.errors import ConfigError

ENV = "SUREHAND_CRASH_AT"


class CrashPoint(enum.StrEnum):
    """Every place a test may kill the process (DESIGN.md section 10: every stage boundary)."""

    WRITE_TASK_BEFORE_COMMIT = "write_task.before_commit"  # the create's transaction is open
    WRITE_TASK_AFTER_COMMIT = "write_task.after_commit"  # committed, the reply not yet given
    SESSION_AFTER_CLAIM = "session.after_claim"  # the claim committed, no lease yet
    SESSION_AFTER_RETURN = "session.after_return"  # the agent's return recorded, not settled
    SESSION_AFTER_DELEGATE = "session.after_delegate"  # a child committed, its answer not given
    OPERATION_AFTER_INTENT = "operation.after_intent"  # the intent committed, the effect not run
    OPERATION_AFTER_EFFECT = "operation.after_effect"  # the effect ran, its outcome unrecorded
    OPERATION_AFTER_OUTCOME = "operation.after_outcome"  # the outcome recorded, agent not back


def crash_point(point: CrashPoint) -> None:
    """Die here, by SIGKILL, if ``point`` is named in ``SUREHAND_CRASH_AT``."""
    armed = os.environ.get(ENV)
    if armed and point in _points(armed):
        os.kill(os.getpid(), signal.SIGKILL)


@functools.cache
def _points(armed: str) -> frozenset[CrashPoint]:
    names = [name.strip() for name in armed.split(",") if name.strip()]
    unknown = [name for name in names if name not in CrashPoint.__members__.values()]
    if unknown:
        raise ConfigError(
            f"{ENV} names {', '.join(unknown)}, which no crash point is; the points are "
            f"{', '.join(CrashPoint)}",
            setting=ENV,
        )
    return frozenset(CrashPoint(name) for name in names)
