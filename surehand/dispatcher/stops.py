"""Stopping sessions on purpose: cancel requests and time limits.

**On the worker.** One :class:`StopWatch` thread per process looks after the sessions it runs:
every ``SUREHAND_STOP_CHECK_SECONDS`` (1 s by default), while at least one runs, it reads the
store once for the cancel requests of all of them (the store is the truth: a request is
durable there before anyone is told) and checks each session's time limit. A session to stop
is stopped with :meth:`Session.stop`: its agent is cancelled (a command agent stops its whole
process tree at once), its port refuses further writes, and the runner ends the attempt
``interrupted`` with cause ``cancelled`` or ``timed_out`` and runs admission on it.

**Time limits.** A TASK's ``time_limit_seconds``, else its role's default
(``SUREHAND_ROLE_TIME_LIMITS``), counted per attempt from the session's start. A command
agent's ``SUREHAND_COMMAND_TIMEOUT_SECONDS`` still caps every program: the shorter one stops it
(the time limit ends ``timed_out``, the command timeout the agent's failure, as before).

**In admission** (:func:`after_stop`): what a stopped attempt's evidence leads to, a cause ->
outcome mapping applied after the effect facts were evaluated:

* a cancelled TASK (a cancel request is recorded, whatever ended its attempt) is never run
  again: an open intent still holds it for its approver (an effect may have happened); else it
  is archived (action ``cancel``) with a REPORT written from the records.
* an attempt that ran out of time with nothing open is held for its approver ("run again or
  cancel"), never re-executed blindly; the approver's review (absent) runs it again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from surehand.config import Settings
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import Evidence
from surehand.errors import ConfigError
from surehand.model import Admission, Attempt, AttemptCause, Task
from surehand.roles import role_problem
from surehand.store import tasks

if TYPE_CHECKING:
    from surehand.dispatcher.sessions import Session

log = logging.getLogger(__name__)

SETTING = "SUREHAND_ROLE_TIME_LIMITS"


# -- time limits -------------------------------------------------------------------------------


def role_time_limits(text: str) -> tuple[float | None, dict[str, float]]:
    """The setting's default (an entry without a role) and its per-role limits; ConfigError
    for a bad or repeated entry."""
    default: float | None = None
    by_role: dict[str, float] = {}
    for entry in (part.strip() for part in text.split(",") if part.strip()):
        role, _, value = entry.rpartition("=")
        seconds = _seconds(entry, value)
        if role and role_problem(role) is not None:
            raise ConfigError(f"{SETTING} entry {entry!r}: {role_problem(role)}", setting=SETTING)
        if (role in by_role) if role else (default is not None):
            raise ConfigError(f"{SETTING}: {role or 'the default'} is given twice", setting=SETTING)
        if role:
            by_role[role] = seconds
        else:
            default = seconds
    return default, by_role


def _seconds(entry: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ConfigError(
            f"{SETTING} entry {entry!r}: give [ROLE=]SECONDS, a positive number", setting=SETTING
        )
    return seconds


def time_limit_for(task: Task, settings: Settings) -> float | None:
    """Seconds an attempt at ``task`` may run: its own limit, else its role's default."""
    if task.fields.time_limit_seconds is not None:
        return float(task.fields.time_limit_seconds)
    default, by_role = role_time_limits(settings.role_time_limits)
    return by_role.get(task.fields.recipient, default)


# -- the worker's watch ------------------------------------------------------------------------


@dataclass
class _Watched:
    session: Session
    limit: float | None
    deadline: float | None


class StopWatch:
    """Stops this process's sessions that were cancelled or ran out of time (one thread)."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._watched: dict[str, _Watched] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()  # a forked child (a prefork pool) starts its own thread

    def watch(self, session: Session) -> None:
        """Watch ``session`` until :meth:`forget`; its time limit counts from now."""
        limit = time_limit_for(session.task, self.services.settings)
        deadline = None if limit is None else time.monotonic() + limit
        with self._lock:
            self._watched[session.attempt.attempt_id] = _Watched(session, limit, deadline)
            if self._thread is None or self._pid != os.getpid():  # ends when idle
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="surehand-stop-watch", daemon=True
                )
                self._thread.start()

    def forget(self, session: Session) -> None:
        with self._lock:
            self._watched.pop(session.attempt.attempt_id, None)

    def _run(self) -> None:
        interval = self.services.settings.stop_check_seconds
        while True:
            with self._lock:
                watched = list(self._watched.values())
                if not watched:
                    self._thread = None
                    return
            try:
                self.check(watched)
            except Exception:  # the store may be away: the next tick reads again
                log.warning("could not read cancel requests; reading again", exc_info=True)
            time.sleep(interval)

    def check(self, watched: list[_Watched]) -> None:
        """One tick: one store read for the cancel requests, then the time limits."""
        ids = [w.session.task_id for w in watched if w.session.stop_cause is None]
        with self.services.store.snapshot() as connection:
            cancelled = tasks.cancel_requested(connection, ids)
        now = time.monotonic()
        for item in watched:
            if item.session.stop_cause is not None:
                continue
            if item.session.task_id in cancelled:
                item.session.stop(AttemptCause.CANCELLED, "the TASK was cancelled")
            elif item.deadline is not None and now >= item.deadline:
                why = f"the time limit of {item.limit:g}s ran out"
                item.session.stop(AttemptCause.TIMED_OUT, why)


# -- admission ---------------------------------------------------------------------------------


def after_stop(
    task: Task, attempt: Attempt, review: Mapping[str, Any] | None, evidence: Evidence
) -> Evidence:
    """The admission for a cancelled TASK or an attempt that ran out of time (see the module
    docstring); any other evidence unchanged."""
    if task.cancel is not None and evidence.admission in (
        Admission.REEXECUTE,
        Admission.RECONCILE_ONLY,
    ):
        why = f"cancelled by {task.cancel.by}: {task.cancel.reason}"
        kept = {key: value for key, value in evidence.refs.items() if key != "retry"}
        return Evidence(
            evidence.fact, Admission.RECONCILE_ONLY, {**kept, "cancelled": True, "why": why}
        )
    if (
        attempt.cause is AttemptCause.TIMED_OUT
        and evidence.admission is Admission.REEXECUTE
        and review is None
        and "retry" not in evidence.refs  # the role's retry policy scheduled it (retry.py)
    ):
        why = f"{attempt.error or 'the attempt ran out of time'}; run it again or cancel it"
        return replace(
            evidence,
            admission=Admission.HOLD_FOR_REVIEW,
            refs={**evidence.refs, "why": why},
            bound_operation_id=None,
        )
    return evidence
