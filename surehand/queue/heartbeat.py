"""The heartbeat: a daemon thread that keeps one session's lease alive.

It renews every ``interval`` seconds (default a third of the TTL, so two renewals may fail
before the lease expires) with the compare-and-renew script, and decides when the lease is
*lost*: then it sets ``lost``, calls ``on_lost`` once and stops. The session reacts by stopping
its agent cooperatively and never settling.

What counts as loss, and what does not:

* renew refused because another attempt holds the key: loss.
* renew refused because the key is gone while Redis kept its dataset (the generation marker,
  see ``keys.py``, is unchanged): the lease expired or was deleted, maybe by an operator or
  after we were paused past the TTL. Loss.
* Redis unreachable (``LeaseUnavailable``): keep retrying. Loss only once a full TTL has passed
  since the last successful renewal, because only then can the key have expired.
* renew refused because the key is gone *and* the generation marker changed, within a TTL of
  the last successful renewal: Redis restarted without persistence (or was flushed). The
  heartbeat puts its lease back with ``SET NX PX``. This is safe because the lease is liveness
  only: fencing lives in the store by epoch, so even a wrongly restored lease cannot let a
  stale session write. ``NX`` means we never overwrite a successor that got there first.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

from surehand.errors import LeaseLost, LeaseUnavailable
from surehand.queue.leases import LeaseStore

log = logging.getLogger(__name__)

_JOIN_TIMEOUT_S = 10.0


class _DeferredStarts:
    """One daemon thread per process that starts deferred heartbeat threads when they are due.

    A session that ends before its first renewal is due never needs a renewing thread of its
    own; deferring the thread's start (never the TTL budget, counted from ``start()``) saves
    creating and joining one per short session. Entries hold weak references, so a session
    that ended (and dropped its heartbeat) costs nothing here until its entry comes due.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, weakref.ref[Heartbeat]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def schedule(self, beat: Heartbeat, due: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), weakref.ref(beat)))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="surehand-heartbeat-starter", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                _, _, ref = heapq.heappop(self._heap)
            beat = ref()
            if beat is None:
                continue
            try:
                beat._launch()
            except Exception:
                log.exception("could not start the heartbeat of %s", beat.task_id)


_deferred = _DeferredStarts()


class Heartbeat:
    """Renews ``task_id``'s lease for ``attempt_id`` until stopped or lost.

    Start it right after acquiring the lease: the TTL budget is counted from ``start()``.
    ``generation`` is the dataset generation marker read together with the acquisition (see
    :meth:`LeaseStore.acquire_with_generation`); without it ``start()`` reads it itself.
    ``now`` (monotonic seconds) and ``sleep`` may be injected; the default sleep wakes up
    early when ``stop()`` is called.
    """

    def __init__(
        self,
        leases: LeaseStore,
        task_id: str,
        attempt_id: str,
        ttl_ms: int,
        *,
        interval: float | None = None,
        on_lost: Callable[[LeaseLost], object] | None = None,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
        generation: str | None = None,
        defer: float = 0.0,
    ) -> None:
        if ttl_ms <= 0 or (interval is not None and interval <= 0):
            raise ValueError("ttl_ms and interval must be positive")
        if defer < 0:
            raise ValueError("defer must not be negative")
        self.leases, self.task_id, self.attempt_id = leases, task_id, attempt_id
        self.ttl_ms = ttl_ms
        self.interval = interval if interval is not None else ttl_ms / 3000.0
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self.renewals = 0
        self.renew_failures = 0  # refused or unreachable renewals, exported as a metric
        self.reacquisitions = 0
        self._on_lost = on_lost
        self._now = now
        self._stopping = threading.Event()
        self._sleep = sleep if sleep is not None else self._stopping.wait
        self._last_ok = 0.0
        self._generation: str | None = generation
        self._thread: threading.Thread | None = None
        self._started = False
        self._defer = defer
        self._deferred_start = False
        self._launch_lock = threading.Lock()

    @property
    def ttl_s(self) -> float:
        return self.ttl_ms / 1000.0

    def start(self) -> None:
        """Begin renewing in a daemon thread named after the TASK.

        With ``defer`` > 0 (a constructor argument) the thread itself starts only after
        ``defer`` seconds (at most one ``interval``), and never if ``stop()`` comes first; the
        TTL budget still counts from now and the first renewal is still due one ``interval``
        from now. Keep a reference to a deferred heartbeat until ``stop()``: one nobody
        references is never started.
        """
        if self._started:
            raise RuntimeError("heartbeat already started")
        self._started = True
        self._last_ok = self._now()
        if self._generation is None:
            self._generation = self._read_generation()
        if self._defer > 0:
            self._deferred_start = True
            _deferred.schedule(self, time.monotonic() + min(self._defer, self.interval))
        else:
            self._launch()

    def _launch(self) -> None:
        with self._launch_lock:
            if self._stopping.is_set() or self._thread is not None:
                return
            name = f"surehand-heartbeat-{self.task_id}"
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = _JOIN_TIMEOUT_S) -> None:
        """Stop renewing. Releases nothing: releasing the lease is the session's job."""
        with self._launch_lock:
            self._stopping.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        if self._deferred_start:  # the first renewal stays due one interval after start()
            first = self._last_ok + min(self.interval, self.ttl_s) - self._now()
            self._sleep(max(0.0, first))
            if self._stopping.is_set() or not self._tick():
                return
        while not self._stopping.is_set():
            self._sleep(self._next_delay())
            if self._stopping.is_set() or not self._tick():
                return

    def _next_delay(self) -> float:
        # While renewals fail, wake no later than the TTL deadline so loss is noticed on time.
        remaining = self._last_ok + self.ttl_s - self._now()
        return max(0.0, min(self.interval, remaining))

    def _tick(self) -> bool:
        """One renewal; False when the lease is lost and the thread should end."""
        started = self._now()
        try:
            renewed = self.leases.renew(self.task_id, self.attempt_id, self.ttl_ms)
        except LeaseUnavailable as exc:
            self.renew_failures += 1
            return self._unreachable(exc)
        if renewed:
            self._last_ok = started  # the new TTL began no earlier than this
            self.renewals += 1
            if self._generation is None:
                self._generation = self._read_generation()
            return True
        self.renew_failures += 1
        try:
            return self._refused(started)
        except LeaseUnavailable as exc:
            return self._unreachable(exc)

    def _unreachable(self, exc: LeaseUnavailable) -> bool:
        if self._now() - self._last_ok < self.ttl_s:
            log.warning("lease renewal for %s failed, will retry: %s", self.task_id, exc)
            return True
        return self._declare_lost("Redis unreachable for longer than the lease TTL")

    def _refused(self, started: float) -> bool:
        holder = self.leases.holder(self.task_id)
        if holder == self.attempt_id:
            return True  # the key changed under the renewal and came back to us: try again
        if holder is not None:
            return self._declare_lost(f"lease taken by attempt {holder}")
        generation = self.leases.generation()
        if self._generation is None or generation == self._generation:
            return self._declare_lost("lease expired or was deleted")
        if started - self._last_ok >= self.ttl_s:
            return self._declare_lost("Redis lost its data and our lease TTL had passed")
        return self._reacquire(started)

    def _reacquire(self, started: float) -> bool:
        if not self.leases.acquire(self.task_id, self.attempt_id, self.ttl_ms):
            return self._declare_lost("lease taken by another attempt after a Redis restart")
        self._generation = self.leases.ensure_generation()
        self._last_ok = started
        self.reacquisitions += 1
        log.warning("Redis lost its data; lease for %s re-acquired", self.task_id)
        return True

    def _read_generation(self) -> str | None:
        try:
            return self.leases.ensure_generation()
        except LeaseUnavailable:
            return None  # unknown: a missing key then counts as loss, the conservative answer

    def _declare_lost(self, reason: str) -> bool:
        self.lost_reason = reason
        self.lost.set()
        log.warning("lease for %s attempt %s lost: %s", self.task_id, self.attempt_id, reason)
        if self._on_lost is not None:
            error = LeaseLost(
                f"lease for {self.task_id} lost: {reason}",
                task_id=self.task_id,
                attempt_id=self.attempt_id,
                reason=reason,
            )
            try:
                self._on_lost(error)
            except Exception:
                log.exception("on_lost callback for %s failed", self.task_id)
        return False
