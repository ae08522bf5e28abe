"""What an agent handler receives: the TASK, its attempt, effect declaration and reporting.

An agent declares every side effect through :meth:`SessionContext.operation` *before* doing it,
so that if the session is lost a successor can tell whether the effect happened.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from surehand.model import Attempt, ReportStatus, RetryPolicy, Task, WriteReportResult


@dataclass(frozen=True)
class EffectResult:
    """Return this from an effect to record an external receipt beside its value."""

    value: Any = None
    external_receipt: str | None = None


class SessionPort(Protocol):
    """The service-layer operations a context delegates to (every one is fenced by epoch)."""

    def operation(
        self,
        name: str,
        args: Mapping[str, Any],
        effect: Callable[[], Any],
        *,
        idempotency_key: str | None,
        retry_policy: RetryPolicy,
        probe: str | None,
    ) -> Any: ...

    def report(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult: ...


class Cancellation(threading.Event):
    """A session's cancellation: an event that also sets the events :meth:`waking` lends it,
    so that one wait (a command agent's, on its program) ends on the program's end *or* this,
    without polling either."""

    def __init__(self) -> None:
        super().__init__()
        self._wakers: set[threading.Event] = set()
        self._wakers_lock = threading.Lock()

    def set(self) -> None:
        with self._wakers_lock:
            super().set()
            for event in self._wakers:
                event.set()

    @contextlib.contextmanager
    def waking(self, event: threading.Event) -> Iterator[None]:
        """While inside, setting this sets ``event`` too (at once if this is set)."""
        with self._wakers_lock:
            self._wakers.add(event)
            if self.is_set():
                event.set()
        try:
            yield
        finally:
            with self._wakers_lock:
                self._wakers.discard(event)


class SessionContext:
    """Handed to an agent handler for one attempt at one TASK."""

    def __init__(
        self,
        *,
        task: Task,
        attempt: Attempt,
        port: SessionPort,
        cancelled: threading.Event,
        work_dir: Path | None = None,
    ) -> None:
        self.task = task
        self.attempt = attempt
        self.work_dir = work_dir
        self._port = port
        self._cancelled = cancelled
        # Why the session's own tools stopped it (stop()): "stale_owner" or "lease_lost".
        self.stopped: tuple[str, str] | None = None
        # What the agent's runner saw besides its result or error (:meth:`note`), kept with
        # the attempt: ``output`` tails, ``usage`` (the CLI's accounting), ``observed``.
        self.details: dict[str, Any] = {}
        self.log = logging.LoggerAdapter(
            logging.getLogger(f"surehand.agent.{task.fields.recipient}"),
            {"task_id": task.task_id, "attempt": attempt.number},
        )

    def note(self, **details: Any) -> None:
        """Keep what was seen of the agent with its attempt (JSON values): e.g.
        ``output={"stdout": ..., "stderr": ...}`` or ``usage={...}``."""
        self.details.update(details)

    @property
    def cancelled(self) -> bool:
        """True once the session lost its lease: stop work, do not settle anything."""
        return self._cancelled.is_set()

    def interrupt(self) -> None:
        """End the session as interrupted (its worker is shutting down): like a lost lease, it
        stops and settles nothing; the reconciler takes the TASK over from its records."""
        self._cancelled.set()

    def stop(self, code: str, why: str) -> None:
        """Stop the session: its tools refused it for good (``code`` ``stale_owner`` or
        ``lease_lost``, ``why`` the whole reason). Like a lost lease it settles nothing; a
        command agent stops its program's process group at once."""
        self.stopped = (code, why)
        self._cancelled.set()

    @contextlib.contextmanager
    def waking(self, event: threading.Event) -> Iterator[bool]:
        """While inside, a cancellation sets ``event`` too; yields whether it will (False for
        a context built on a plain ``threading.Event``: then poll :attr:`cancelled`)."""
        if not isinstance(self._cancelled, Cancellation):
            yield False
            return
        with self._cancelled.waking(event):
            yield True

    def wait_cancelled(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early (returning True) if cancelled."""
        return self._cancelled.wait(timeout)

    def operation(
        self,
        name: str,
        args: Mapping[str, Any],
        effect: Callable[[], Any],
        *,
        idempotency_key: str | None = None,
        retry_policy: RetryPolicy | str = RetryPolicy.NONE,
        probe: str | None = None,
    ) -> Any:
        """Declare a side effect, run it, and record its outcome; return the effect's value.

        The intent is committed before ``effect`` runs and the outcome after it. If this TASK
        already recorded a successful outcome for the same name and args, ``effect`` does not
        run again and the recorded value is returned. ``idempotency_key`` with
        ``retry_policy="keyed"`` lets a successor repeat an interrupted effect with the same
        key; ``probe`` names a registered probe that can tell whether the effect happened.
        """
        return self._port.operation(
            name,
            args,
            effect,
            idempotency_key=idempotency_key,
            retry_policy=RetryPolicy(retry_policy),
            probe=probe,
        )

    def report(
        self,
        body: str,
        status: ReportStatus | str = ReportStatus.DONE,
        *,
        submission_id: str | None = None,
    ) -> WriteReportResult:
        """Write a REPORT now (the session's result otherwise becomes the REPORT at settle)."""
        return self._port.report(body, ReportStatus(status), submission_id)
