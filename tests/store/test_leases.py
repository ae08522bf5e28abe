"""The lease contract, run against fakeredis and real Redis, with Lua and the WATCH fallback.

Leases are liveness only (fencing lives in the store), but their compare-then-act rules must
hold exactly: only the holder renews or releases, and a key is held by at most one attempt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from surehand.errors import ConfigError, LeaseUnavailable
from surehand.queue.keys import generation_key, lease_key
from surehand.queue.leases import LeaseStore
from surehand.queue.redis_client import POOL_CONNECTIONS, connect_redis, shared_fake_server
from tests.procs import private_redis

TASK = "TASK-20260101-001"
TTL_MS = 30_000


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(0.01)


def test_the_lease_key_is_lease_colon_task_id_in_the_default_namespace() -> None:
    assert lease_key(TASK) == f"lease:{TASK}"
    assert lease_key(TASK, "ns") == f"ns:lease:{TASK}"


def test_an_acquired_lease_is_held_by_the_acquiring_attempt(lease_store: LeaseStore) -> None:
    assert lease_store.acquire(TASK, "attempt-a", TTL_MS)
    assert lease_store.holder(TASK) == "attempt-a"


def test_a_second_acquirer_is_refused_while_the_lease_is_held(lease_store: LeaseStore) -> None:
    assert lease_store.acquire(TASK, "attempt-a", TTL_MS)
    assert not lease_store.acquire(TASK, "attempt-b", TTL_MS)
    assert lease_store.holder(TASK) == "attempt-a"


def test_renewal_by_the_owner_extends_the_ttl(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    lease_store.acquire(TASK, "attempt-a", 1_000)
    assert lease_store.renew(TASK, "attempt-a", 60_000)
    assert int(redis_client.pttl(lease_store.key(TASK))) > 1_000


def test_renewal_by_another_attempt_is_refused_and_leaves_the_ttl_alone(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    lease_store.acquire(TASK, "attempt-a", 1_000)
    assert not lease_store.renew(TASK, "attempt-b", 60_000)
    assert 0 < int(redis_client.pttl(lease_store.key(TASK))) <= 1_000
    assert lease_store.holder(TASK) == "attempt-a"


def test_renewal_of_a_missing_lease_is_refused_and_creates_nothing(
    lease_store: LeaseStore,
) -> None:
    assert not lease_store.renew(TASK, "attempt-a", TTL_MS)
    assert lease_store.holder(TASK) is None


def test_release_by_another_attempt_is_refused_and_keeps_the_key(
    lease_store: LeaseStore,
) -> None:
    lease_store.acquire(TASK, "attempt-a", TTL_MS)
    assert not lease_store.release(TASK, "attempt-b")
    assert lease_store.holder(TASK) == "attempt-a"


def test_release_by_the_owner_frees_the_lease_for_a_successor(lease_store: LeaseStore) -> None:
    lease_store.acquire(TASK, "attempt-a", TTL_MS)
    assert lease_store.release(TASK, "attempt-a")
    assert lease_store.holder(TASK) is None
    assert lease_store.acquire(TASK, "attempt-b", TTL_MS)


def test_an_expired_lease_can_be_acquired_by_another_attempt(lease_store: LeaseStore) -> None:
    lease_store.acquire(TASK, "attempt-a", 50)
    wait_until(lambda: lease_store.holder(TASK) is None)
    assert lease_store.acquire(TASK, "attempt-b", TTL_MS)
    assert lease_store.holder(TASK) == "attempt-b"


def test_a_late_renewal_from_an_old_owner_cannot_extend_its_successors_lease(
    lease_store: LeaseStore,
) -> None:
    lease_store.acquire(TASK, "attempt-a", 50)
    wait_until(lambda: lease_store.acquire(TASK, "attempt-b", TTL_MS))
    assert not lease_store.renew(TASK, "attempt-a", TTL_MS)
    assert not lease_store.release(TASK, "attempt-a")
    assert lease_store.holder(TASK) == "attempt-b"


def test_sixteen_concurrent_acquirers_produce_exactly_one_winner(
    lease_store: LeaseStore,
) -> None:
    start = threading.Barrier(16)
    winners: list[str] = []

    def race(attempt_id: str) -> None:
        start.wait()
        if lease_store.acquire(TASK, attempt_id, TTL_MS):
            winners.append(attempt_id)

    threads = [threading.Thread(target=race, args=(f"attempt-{n}",)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(winners) == 1
    assert lease_store.holder(TASK) == winners[0]


def test_holders_reports_held_and_missing_leases(lease_store: LeaseStore) -> None:
    lease_store.acquire("TASK-20260101-001", "attempt-a", TTL_MS)
    lease_store.acquire("TASK-20260101-003", "attempt-c", TTL_MS)
    tasks = ["TASK-20260101-001", "TASK-20260101-002", "TASK-20260101-003"]
    assert lease_store.holders(tasks) == {
        "TASK-20260101-001": "attempt-a",
        "TASK-20260101-002": None,
        "TASK-20260101-003": "attempt-c",
    }


def count_commands(monkeypatch: pytest.MonkeyPatch, client: redis.Redis) -> list[str]:
    """Record the name of every command the client sends (one entry per round trip)."""
    sent: list[str] = []
    original: Callable[..., Any] = client.execute_command

    def recording(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]).upper())
        return original(*args, **options)

    monkeypatch.setattr(client, "execute_command", recording)
    return sent


def test_holders_costs_one_round_trip_per_chunk(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LeaseStore(redis_client, namespace, batch_size=3)
    tasks = [f"TASK-20260101-{n:03d}" for n in range(1, 8)]
    for task_id in tasks[::2]:
        store.acquire(task_id, f"attempt-{task_id}", TTL_MS)
    sent = count_commands(monkeypatch, redis_client)
    holders = store.holders(tasks)
    assert sent == ["MGET", "MGET", "MGET"]
    assert [task for task, holder in holders.items() if holder] == tasks[::2]


def test_holders_of_no_tasks_costs_no_round_trip(
    lease_store: LeaseStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = count_commands(monkeypatch, redis_client)
    assert lease_store.holders([]) == {}
    assert sent == []


def test_the_lua_scripts_run_on_this_backend(redis_client: redis.Redis, namespace: str) -> None:
    store = LeaseStore(redis_client, namespace)
    store.acquire(TASK, "attempt-a", TTL_MS)
    assert store.renew(TASK, "attempt-a", TTL_MS)
    assert store.scripting is not False, "no Lua runtime: fakeredis[lua] (lupa) is a dependency"
    assert store.release(TASK, "attempt-a")


def test_a_non_positive_ttl_is_refused(lease_store: LeaseStore) -> None:
    with pytest.raises(ValueError, match="positive"):
        lease_store.acquire(TASK, "attempt-a", 0)


def test_the_generation_marker_is_minted_once_and_kept(
    lease_store: LeaseStore, redis_client: redis.Redis, namespace: str
) -> None:
    assert lease_store.generation() is None
    first = lease_store.ensure_generation()
    assert lease_store.ensure_generation() == first == lease_store.generation()
    redis_client.delete(generation_key(namespace))
    assert lease_store.ensure_generation() != first


def test_acquiring_with_the_generation_takes_the_lease_once_and_reads_one_marker(
    lease_store: LeaseStore, redis_client: redis.Redis, namespace: str
) -> None:
    taken, marker = lease_store.acquire_with_generation(TASK, "attempt-a", TTL_MS)
    refused, same = lease_store.acquire_with_generation(TASK, "attempt-b", TTL_MS)

    assert (taken, refused) == (True, False)
    assert lease_store.holder(TASK) == "attempt-a"
    assert 0 < redis_client.pttl(lease_key(TASK, namespace)) <= TTL_MS
    assert marker == same == lease_store.generation()


def test_acquiring_with_the_generation_mints_a_new_marker_after_redis_forgot_it(
    lease_store: LeaseStore, redis_client: redis.Redis, namespace: str
) -> None:
    _, first = lease_store.acquire_with_generation(TASK, "attempt-a", TTL_MS)
    redis_client.delete(generation_key(namespace), lease_key(TASK, namespace))

    taken, second = lease_store.acquire_with_generation(TASK, "attempt-b", TTL_MS)

    assert taken
    assert second != first
    assert second == lease_store.generation()


def test_an_unreachable_redis_raises_lease_unavailable_not_a_redis_error() -> None:
    store = LeaseStore(connect_redis("redis://127.0.0.1:1/0"))
    with pytest.raises(LeaseUnavailable) as caught:
        store.acquire(TASK, "attempt-a", TTL_MS)
    assert isinstance(caught.value.__cause__, redis.ConnectionError)
    assert caught.value.retryable
    with pytest.raises(LeaseUnavailable):
        store.ping()


def test_a_renewal_during_an_outage_raises_lease_unavailable(
    fake_lease_store: LeaseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_lease_store.acquire(TASK, "attempt-a", TTL_MS)
    monkeypatch.setattr(shared_fake_server(), "connected", False)
    with pytest.raises(LeaseUnavailable):
        fake_lease_store.renew(TASK, "attempt-a", TTL_MS)
    with pytest.raises(LeaseUnavailable):
        fake_lease_store.holders([TASK])


def test_every_embedded_client_shares_one_fake_server() -> None:
    key = "test-shared-fake:probe"
    connect_redis("").set(key, "seen", px=5_000)
    assert connect_redis("fakeredis://").get(key) == "seen"


def test_an_unknown_redis_url_scheme_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="SUREHAND_REDIS_URL"):
        connect_redis("http://127.0.0.1:6379")


# -- acquire is idempotent for its own attempt (issue 10, finding 5) -------------------------


def test_acquiring_a_lease_its_own_attempt_holds_succeeds_and_refreshes_the_ttl(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    """A retry after a lost reply: the SET happened, the caller never heard; the retry must
    find its own attempt id and succeed, never report "held by another attempt"."""
    assert lease_store.acquire(TASK, "attempt-a", 1_000)
    assert lease_store.acquire(TASK, "attempt-a", 60_000)
    assert lease_store.holder(TASK) == "attempt-a"
    assert int(redis_client.pttl(lease_store.key(TASK))) > 1_000


def test_acquiring_with_the_generation_is_idempotent_for_its_own_attempt(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    first = lease_store.acquire_with_generation(TASK, "attempt-a", 1_000)
    again = lease_store.acquire_with_generation(TASK, "attempt-a", 60_000)
    other = lease_store.acquire_with_generation(TASK, "attempt-b", 60_000)

    assert (first[0], again[0], other[0]) == (True, True, False)
    assert first[1] == again[1] == other[1] == lease_store.generation()
    assert lease_store.holder(TASK) == "attempt-a"
    assert int(redis_client.pttl(lease_store.key(TASK))) > 1_000


def test_another_attempts_acquire_leaves_the_holders_ttl_alone(
    lease_store: LeaseStore, redis_client: redis.Redis
) -> None:
    assert lease_store.acquire(TASK, "attempt-a", 1_000)
    assert not lease_store.acquire(TASK, "attempt-b", 60_000)
    assert 0 < int(redis_client.pttl(lease_store.key(TASK))) <= 1_000


@pytest.mark.parametrize("scripting", [None, False], ids=["scripts", "watch"])
@pytest.mark.parametrize("saved", [True, False], ids=["kept-by-restart", "lost-by-restart"])
def test_a_retried_acquire_after_a_redis_restart_takes_its_own_lease(
    tmp_path: Path, scripting: bool | None, saved: bool
) -> None:
    """The lease survives a restart (Redis saved it) or not (no persistence): either way the
    same attempt's retry holds it afterwards, and another attempt is still refused."""
    with private_redis(tmp_path) as server:
        client = connect_redis(server.url)
        store = LeaseStore(client, "restart", scripting=scripting)
        assert store.acquire_with_generation(TASK, "attempt-a", TTL_MS)[0]
        if saved:
            client.save()  # an RDB snapshot the restarted server loads
        server.restart()  # returns once the new server answers PING
        assert (store.holder(TASK) == "attempt-a") is saved

        taken, _ = store.acquire_with_generation(TASK, "attempt-a", TTL_MS)

        assert taken
        assert store.holder(TASK) == "attempt-a"
        assert not store.acquire(TASK, "attempt-b", TTL_MS)
        client.close()


def test_callers_beyond_the_pool_wait_for_a_connection_instead_of_failing(tmp_path: Path) -> None:
    # A worker holding thousands of sessions renews that many leases on one client: at 3,000
    # sessions redis-py's default pool refused renewals beyond its 100 connections
    # (MaxConnectionsError) and sessions lost their leases (bench/scale/run.py).
    callers = POOL_CONNECTIONS + 20
    with private_redis(tmp_path) as server:
        client = connect_redis(server.url)
        barrier, errors = threading.Barrier(callers), []

        def renew_at_once(n: int) -> None:
            barrier.wait()
            try:  # each holds its connection for 0.2 s: all of them at once overflow the pool
                client.blpop([f"nothing-{n}"], timeout=0.2)
            except redis.RedisError as error:
                errors.append(error)

        threads = [threading.Thread(target=renew_at_once, args=(n,)) for n in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
