"""The background publisher of the outbox: creates answer without waiting for the broker.

``surehand api`` and ``surehand up`` run one :class:`OutboxPublisher` thread. A creating
commit wakes it (``Services.wake_publisher``); it drains the outbox in batches
(:func:`~surehand.dispatcher.dispatch.drain_outbox`): under load, every TASK committed while
it publishes one batch goes into the next. It also drains when it starts (rows a crashed
process left behind) and every ``sweep_interval_seconds`` when nothing woke it (rows queued by
processes without a broker). A drain that fails (store unavailable) is logged and retried at
the next wake or interval; the dispatcher sweep remains the safety net for a process that dies.

Drains start at most every ``spacing_seconds`` (10 ms): a wake that comes sooner after the last
drain began waits for the rest of it, so that the creates committed meanwhile are published in
one batch. Without it, a publisher faster than the creates (one Redis pipeline per batch)
drains nearly every create alone, and each drain's fixed store work (taking its rows, its read of
the TASKs, its ``published`` write: three statements) is paid per create instead of per batch. An
idle publisher (its last drain longer ago than that) drains at once, so a create's start
latency on a quiet server is unchanged.
"""

from __future__ import annotations

import logging
import threading
import time

from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import drain_outbox

log = logging.getLogger(__name__)

SPACING_SECONDS = 0.01


def pause_before_drain(last_start: float, now: float, spacing: float) -> float:
    """Seconds to wait before a drain so that drains start at least ``spacing`` apart."""
    return max(0.0, last_start + spacing - now)


class OutboxPublisher:
    """One thread draining the outbox when woken, at start, and every ``idle_seconds``."""

    def __init__(
        self, services: Services, *, idle_seconds: float, spacing_seconds: float = SPACING_SECONDS
    ) -> None:
        self.services = services
        self.idle_seconds = idle_seconds
        self.spacing_seconds = spacing_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread (once); its first drain runs at once."""
        with self._lock:
            if self._thread is not None:
                return
            self._wake.set()
            self._thread = threading.Thread(target=self._run, name="surehand-outbox", daemon=True)
            self._thread.start()

    def wake(self) -> bool:
        """Ask for a drain (after a commit); True when the thread runs and will drain."""
        if self._thread is None or self._stop.is_set():
            return False
        self._wake.set()
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the drain in progress; rows left are drained by the next start."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        last_start = float("-inf")
        while not self._stop.is_set():
            self._wake.wait(self.idle_seconds)
            pause = pause_before_drain(last_start, time.monotonic(), self.spacing_seconds)
            if pause > 0:
                self._stop.wait(pause)  # creates committed meanwhile join this drain
            last_start = time.monotonic()
            # Cleared before draining: a commit that wakes us during the drain is committed
            # already, so either this drain or the next one (woken at once) publishes it.
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                drain_outbox(self.services)
            except Exception:
                log.exception("draining the outbox failed; retrying in %.1f s", self.idle_seconds)
