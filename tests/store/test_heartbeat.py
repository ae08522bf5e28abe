"""The heartbeat keeps a lease alive, reports loss exactly once, and rides out short outages.

Liveness is checked by polling with deadlines, never by timing assertions. Schedule and outage
tests drive the heartbeat with a fake monotonic clock whose ``sleep`` advances time, so they do
not depend on the machine's speed; a paused owner is simulated by simply not running its
heartbeat.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from surehand.errors import LeaseLost, LeaseUnavailable
from surehand.queue.heartbeat import Heartbeat
from surehand.queue.leases import LeaseStore
from tests.redis_fixtures import delete_namespace

TASK = "TASK-20260101-001"
ME = "attempt-a"


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(0.01)


class LossRecorder:
    """An ``on_lost`` callback that remembers every call."""

    def __init__(self) -> None:
        self.calls: list[LeaseLost] = []

    def __call__(self, error: LeaseLost) -> None:
        self.calls.append(error)


class FakeClock:
    """Monotonic time that only moves when the heartbeat sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self.t

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.t += seconds
        time.sleep(0.001)  # let the test thread run


class FlakyLeases(LeaseStore):
    """A LeaseStore whose renewals fail as if Redis were down, a set number of times."""

    def __init__(self, inner: LeaseStore, failures: int, on_failure: Callable[[], object]) -> None:
        super().__init__(inner.client, inner.namespace)
        self.failures_left = failures
        self.on_failure = on_failure

    def renew(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        if self.failures_left > 0:
            self.failures_left -= 1
            self.on_failure()
            raise LeaseUnavailable("simulated Redis outage")
        return super().renew(task_id, attempt_id, ttl_ms)


class RecordingLeases(LeaseStore):
    """Records the fake clock's time of every renewal. The store itself is renewed for long:
    its real clock must not decide a test of the heartbeat's schedule."""

    def __init__(self, inner: LeaseStore, clock: FakeClock) -> None:
        super().__init__(inner.client, inner.namespace)
        self.clock = clock
        self.renewed_at: list[float] = []

    def renew(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        self.renewed_at.append(self.clock.now())
        return super().renew(task_id, attempt_id, 30_000)

    def gaps(self) -> list[float]:
        """Time from the start (0) to the first renewal, then between renewals."""
        return [b - a for a, b in zip([0.0, *self.renewed_at], self.renewed_at, strict=False)]


def heartbeat(
    leases: LeaseStore, recorder: LossRecorder, clock: FakeClock | None = None
) -> Heartbeat:
    """A 300 ms lease renewed every 100 ms, on the real or the fake clock."""
    if clock is None:
        return Heartbeat(leases, TASK, ME, 300, interval=0.1, on_lost=recorder)
    return Heartbeat(
        leases, TASK, ME, 300, interval=0.1, on_lost=recorder, now=clock.now, sleep=clock.sleep
    )


def test_the_default_interval_is_a_third_of_the_ttl(fake_lease_store: LeaseStore) -> None:
    assert Heartbeat(fake_lease_store, TASK, ME, 30_000).interval == pytest.approx(10.0)


def test_a_heartbeat_renews_a_short_ttl_lease_every_interval_for_over_a_second(
    lease_store: LeaseStore,
) -> None:
    recorder, clock = LossRecorder(), FakeClock()
    leases = RecordingLeases(lease_store, clock)
    assert leases.acquire(TASK, ME, 30_000)
    with heartbeat(leases, recorder, clock) as beat:
        wait_until(lambda: clock.now() > 1.2 and beat.renewals >= 12)
    assert max(leases.gaps()) == pytest.approx(0.1)  # every interval, well inside the 300 ms
    assert not beat.lost.is_set()
    assert recorder.calls == []
    assert leases.holder(TASK) == ME


def test_stopping_the_heartbeat_releases_nothing(lease_store: LeaseStore) -> None:
    lease_store.acquire(TASK, ME, 30_000)
    beat = heartbeat(lease_store, LossRecorder())
    beat.start()
    beat.stop()
    assert not beat.running
    assert lease_store.holder(TASK) == ME


def test_loss_is_reported_once_when_the_lease_is_deleted_under_the_heartbeat(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    recorder = LossRecorder()
    lease_store.acquire(TASK, ME, 300)
    beat = heartbeat(lease_store, recorder)
    beat.start()
    redis_client.delete(lease_store.key(TASK))
    wait_until(lambda: not beat.running)
    assert beat.lost.is_set()
    assert len(recorder.calls) == 1
    assert recorder.calls[0].details["reason"] == "lease expired or was deleted"
    assert lease_store.holder(TASK) is None


def test_loss_is_reported_once_when_another_attempt_overwrites_the_lease(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    recorder = LossRecorder()
    lease_store.acquire(TASK, ME, 300)
    beat = heartbeat(lease_store, recorder)
    beat.start()
    redis_client.set(lease_store.key(TASK), "attempt-b", px=30_000)
    wait_until(lambda: not beat.running)
    assert len(recorder.calls) == 1
    assert "attempt-b" in (beat.lost_reason or "")
    assert lease_store.holder(TASK) == "attempt-b"


def test_a_redis_outage_shorter_than_the_ttl_is_not_a_loss(
    fake_lease_store: LeaseStore,
) -> None:
    recorder, clock = LossRecorder(), FakeClock()
    flaky = FlakyLeases(fake_lease_store, failures=2, on_failure=lambda: None)
    flaky.acquire(TASK, ME, 30_000)
    with heartbeat(flaky, recorder, clock) as beat:
        wait_until(lambda: beat.renewals >= 3)
    assert not beat.lost.is_set()
    assert beat.renew_failures == 2
    assert flaky.holder(TASK) == ME


def test_a_redis_outage_longer_than_the_ttl_is_a_loss(fake_lease_store: LeaseStore) -> None:
    recorder, clock = LossRecorder(), FakeClock()
    flaky = FlakyLeases(fake_lease_store, failures=10**6, on_failure=lambda: None)
    flaky.acquire(TASK, ME, 30_000)
    beat = heartbeat(flaky, recorder, clock)
    beat.start()
    wait_until(lambda: not beat.running)
    assert len(recorder.calls) == 1
    assert beat.lost_reason == "Redis unreachable for longer than the lease TTL"
    assert clock.now() >= 0.3
    assert beat.renew_failures >= 3


def test_a_redis_restart_within_the_ttl_puts_the_lease_back(
    lease_store: LeaseStore, redis_client: redis.Redis, namespace: str
) -> None:
    recorder, clock = LossRecorder(), FakeClock()

    def restart_without_persistence() -> None:
        delete_namespace(redis_client, namespace)

    flaky = FlakyLeases(lease_store, failures=1, on_failure=restart_without_persistence)
    flaky.acquire(TASK, ME, 30_000)
    with heartbeat(flaky, recorder, clock) as beat:
        wait_until(lambda: beat.renewals >= 2)
    assert not beat.lost.is_set()
    assert beat.reacquisitions == 1
    assert lease_store.holder(TASK) == ME


def test_a_lease_taken_by_a_successor_after_a_restart_is_a_loss(
    lease_store: LeaseStore, redis_client: redis.Redis, namespace: str
) -> None:
    recorder, clock = LossRecorder(), FakeClock()

    def restart_then_successor_claims() -> None:
        delete_namespace(redis_client, namespace)
        lease_store.acquire(TASK, "attempt-b", 30_000)

    flaky = FlakyLeases(lease_store, failures=1, on_failure=restart_then_successor_claims)
    flaky.acquire(TASK, ME, 30_000)
    beat = heartbeat(flaky, recorder, clock)
    beat.start()
    wait_until(lambda: not beat.running)
    assert len(recorder.calls) == 1
    assert lease_store.holder(TASK) == "attempt-b"


def test_an_owner_paused_past_its_ttl_does_not_take_its_lease_back(
    lease_store: LeaseStore,
) -> None:
    recorder = LossRecorder()
    lease_store.ensure_generation()
    lease_store.acquire(TASK, ME, 100)
    paused = heartbeat(lease_store, recorder)  # never started: the owner is paused
    wait_until(lambda: lease_store.holder(TASK) is None)
    paused.start()
    wait_until(lambda: not paused.running)
    assert len(recorder.calls) == 1
    assert lease_store.holder(TASK) is None


def test_a_failing_on_lost_callback_still_stops_the_heartbeat(
    fake_lease_store: LeaseStore,
) -> None:
    def explode(error: LeaseLost) -> None:
        raise RuntimeError("callback bug")

    fake_lease_store.acquire(TASK, ME, 300)
    beat = Heartbeat(fake_lease_store, TASK, ME, 300, interval=0.05, on_lost=explode)
    beat.start()
    fake_lease_store.release(TASK, ME)
    wait_until(lambda: not beat.running)
    assert beat.lost.is_set()


def test_a_heartbeat_cannot_be_started_twice(fake_lease_store: LeaseStore) -> None:
    beat = Heartbeat(fake_lease_store, TASK, ME, 30_000)
    with beat, pytest.raises(RuntimeError, match="already started"):
        beat.start()


def test_a_deferred_heartbeat_renews_a_short_ttl_lease_from_one_interval_after_start(
    lease_store: LeaseStore,
) -> None:
    recorder, clock = LossRecorder(), FakeClock()
    leases = RecordingLeases(lease_store, clock)
    assert leases.acquire(TASK, ME, 30_000)
    beat = Heartbeat(
        leases,
        TASK,
        ME,
        300,
        interval=0.1,
        on_lost=recorder,
        defer=0.1,
        now=clock.now,
        sleep=clock.sleep,
    )
    beat.start()
    try:
        wait_until(lambda: clock.now() > 1.2 and beat.renewals >= 12)
    finally:
        beat.stop()
    assert leases.gaps()[0] == pytest.approx(0.1)  # the deferral did not delay the first one
    assert max(leases.gaps()) == pytest.approx(0.1)
    assert recorder.calls == []
    assert leases.holder(TASK) == ME


def test_a_deferred_heartbeat_stopped_before_its_first_renewal_never_starts_a_thread(
    lease_store: LeaseStore,
) -> None:
    lease_store.acquire(TASK, ME, 30_000)
    beat = Heartbeat(lease_store, TASK, ME, 30_000, interval=10.0, defer=10.0)
    beat.start()
    beat.stop()
    assert not beat.running
    assert beat.renewals == 0
    assert lease_store.holder(TASK) == ME
    with pytest.raises(RuntimeError, match="already started"):
        beat.start()


def test_a_deferred_heartbeat_reports_a_deleted_lease(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    recorder = LossRecorder()
    lease_store.acquire(TASK, ME, 300)
    beat = Heartbeat(lease_store, TASK, ME, 300, interval=0.1, on_lost=recorder, defer=0.1)
    beat.start()
    redis_client.delete(lease_store.key(TASK))
    wait_until(beat.lost.is_set)
    wait_until(lambda: not beat.running)
    assert len(recorder.calls) == 1
    assert recorder.calls[0].details["reason"] == "lease expired or was deleted"
