"""What an agent handler receives: the TASK, its attempt, effect declaration and reporting.

An agent declares every side effect through :meth:`SessionContext.operation` *before* doing it,
so that if the session is lost a successor can tell whether the effect happened.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from surehand.model import (
    Attempt,
    ReportStatus,
    RetryPolicy,
    Task,
    WriteReportResult,
    WriteTaskResult,
)


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
        probe_args: Mapping[str, Any] | None = None,
    ) -> Any: ...

    def report(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult: ...

    def delegate(self, arguments: Mapping[str, Any]) -> WriteTaskResult: ...

    def wait_for(self, children: Sequence[str]) -> dict[str, Any]: ...

    def children(self) -> list[dict[str, Any]]: ...


class Cancellation(threading.Event):
    """A session's cancellation: an event that also sets the events :meth:`waking` lends it,
    so that one wait (a command agent's, on its program) ends on the program's end *or* this,
    without polling either."""

    def __init__(self) -> None:
        super().__init__()
        self._wakers: set[threading.Event] = set()
        self._wakers_lock = threading.Lock()
        # Why the session is stopped, when it is stopped on purpose (a cancel, a time limit);
        # None for a lost lease or a shutdown.
        self.why: str | None = None

    def stop(self, why: str) -> None:
        """Set, saying why (the first reason given stands)."""
        with self._wakers_lock:
            if self.why is None:
                self.why = why
        self.set()

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
        services: Any = None,
    ) -> None:
        self.task = task
        self.attempt = attempt
        self.work_dir = work_dir
        # The service layer the runner runs this session with (opaque here): the session MCP
        # server acts with it, so that what the tools create (a delegated child) is published
        # by this process's publisher, not left for the sweep.
        self.services = services
        self._port = port
        self._cancelled = cancelled
        # Why the session's own tools stopped it (stop()): "stale_owner", "lease_lost", or
        # "waiting" (it waits for its children: wait_for).
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

    @property
    def stop_reason(self) -> str | None:
        """Why the session was stopped on purpose (cancelled, out of time), if it was."""
        return getattr(self._cancelled, "why", None)

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
        probe_args: Mapping[str, Any] | None = None,
    ) -> Any:
        """Declare a side effect, run it, and record its outcome; return the effect's value.

        The intent is committed before ``effect`` runs and the outcome after it. If this TASK
        already recorded a successful outcome for the same name and args, ``effect`` does not
        run again and the recorded value is returned. ``idempotency_key`` with
        ``retry_policy="keyed"`` lets a successor repeat an interrupted effect with the same
        key; ``probe`` names a registered probe that can tell whether the effect happened,
        ``probe_args`` what it looks at (a built-in probe's are validated: ``git.push`` takes
        ``remote``, ``ref`` and ``commit``; see docs/probes.md).
        """
        return self._port.operation(
            name,
            args,
            effect,
            idempotency_key=idempotency_key,
            retry_policy=RetryPolicy(retry_policy),
            probe=probe,
            probe_args=probe_args,
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

    def delegate(
        self,
        recipient: str,
        subject: str,
        body: str = "",
        *,
        key: str | None = None,
        depends_on: Sequence[str] = (),
        priority: str = "P2",
        references: Sequence[str] = (),
        risk_level: str = "medium",
    ) -> WriteTaskResult:
        """Create a child TASK for ``recipient`` (sent as this TASK's recipient, ``parent`` set
        to this TASK), once: the same ``key`` (or, without one, the same request) from any
        attempt of this TASK returns the same child with disposition ``reused``; a changed
        request under a key already used is disposition ``conflict`` and creates nothing.
        ``depends_on``: task ids of siblings (children of this TASK) that must be done first.
        Fenced like every session write (``StaleOwner`` once this attempt lost its TASK)."""
        return self._port.delegate(
            {
                "recipient": recipient,
                "subject": subject,
                "body": body,
                "key": key,
                "depends_on": list(depends_on),
                "priority": priority,
                "references": list(references),
                "risk_level": risk_level,
            }
        )

    def wait_for(self, children: Sequence[str] = ()) -> dict[str, Any]:
        """Wait for child TASKs (task ids; none: every child of this TASK) without holding a
        worker. Answers ``{"status": "ready"}`` when they are all done already: go on. Else
        ``{"status": "waiting"}``: this attempt has ended (the TASK is back in ``inbox``), so
        return at once; the TASK runs again, in a new attempt, once they are all done, and
        :meth:`children` then gives their REPORTs."""
        answer = self._port.wait_for(list(children))
        if answer["status"] == "waiting":
            self.stop("waiting", f"{self.task.task_id} waits for {', '.join(answer['children'])}")
        return answer

    def children(self) -> list[dict[str, Any]]:
        """The child TASKs this TASK delegated (by any attempt): task_id, key, recipient,
        subject, bucket, held, depends_on, and the last REPORT's body (None before one)."""
        return self._port.children()
