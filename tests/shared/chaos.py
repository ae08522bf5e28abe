"""What other test modules need from ``tests/chaos/test_chaos.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from surehand.config import Settings
from surehand.dispatcher.reconciler import PassReport, Reconciler, reconcile_loop
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    Attempt,
    EventKind,
    InterruptionCase,
    Operation,
    Task,
)
from surehand.store import Store, events
from surehand.store import tasks as task_rows
from tests.chaos_agents import EFFECTS_ENV, MARKERS_ENV, read_effects
from tests.deployment import REPO, start_ready, wait_showing_logs
from tests.procs import Proc, RedisServer

TTL = 1.0


HEARTBEAT = 0.3


GRACE = 0.5


INTERVAL = 0.5


postgres_only = pytest.mark.parametrize("store", ["postgres"], indirect=True)


class CountedPasses:
    """A reconciler whose completed passes are counted (for "nothing happened in N passes")."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler
        self.count = 0

    def run_once(self) -> PassReport:
        report = self.reconciler.run_once()
        self.count += 1
        return report


@dataclass
class Chaos:
    """One test's processes: broker, lease Redis, workers, and in-process reconcilers."""

    tmp: Path
    store: Store
    broker: RedisServer
    lease_redis: RedisServer
    handles: list[Surehand] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    loops: list[threading.Thread] = field(default_factory=list)
    counted: list[CountedPasses] = field(default_factory=list)

    @property
    def effects_path(self) -> Path:
        return self.tmp / "effects.jsonl"

    @property
    def markers(self) -> Path:
        return self.tmp / "markers"

    def settings(self) -> Settings:
        return Settings(
            database_url=self.store.url,
            redis_url=self.lease_redis.url,
            broker_url=self.broker.url,
            lease_ttl_seconds=TTL,
            heartbeat_seconds=HEARTBEAT,
            lost_grace_seconds=GRACE,
            reconcile_interval_seconds=INTERVAL,
            work_dir=self.tmp / "work",
        )

    def handle(self) -> Surehand:
        """A test-side handle: writes, reviews and reconciles (SystemClock)."""
        sh = Surehand(settings=self.settings())
        sh.store.ensure_schema()
        self.handles.append(sh)
        return sh

    @property
    def sh(self) -> Surehand:
        return self.handles[0] if self.handles else self.handle()

    def env(self, agent: str, crash_at: str | None, extra: dict[str, str]) -> dict[str, str]:
        values = {
            "SUREHAND_DATABASE_URL": self.store.url,
            "SUREHAND_REDIS_URL": self.lease_redis.url,
            "SUREHAND_BROKER_URL": self.broker.url,
            "SUREHAND_AGENTS": f"DEV=tests.chaos_agents:{agent}",
            "SUREHAND_LEASE_TTL_SECONDS": str(TTL),
            "SUREHAND_HEARTBEAT_SECONDS": str(HEARTBEAT),
            "SUREHAND_LOST_GRACE_SECONDS": str(GRACE),
            "SUREHAND_WORK_DIR": str(self.tmp / "work"),
            "PYTHONPATH": str(REPO),
            EFFECTS_ENV: str(self.effects_path),
            MARKERS_ENV: str(self.markers),
            **extra,
        }
        if crash_at:
            values["SUREHAND_CRASH_AT"] = crash_at
        return values

    def worker(self, agent: str, *, crash_at: str | None = None, **extra: str) -> Proc:
        """Start ``surehand worker --roles DEV`` (one session at a time) and wait until ready."""
        name = f"w{len(self.procs) + 1}"
        args = ["worker", "--roles", "DEV", "--concurrency", "1", "--hostname", f"{name}@chaos"]
        env = self.env(agent, crash_at, extra)
        return start_ready(self.procs, args, env, self.tmp / f"{name}.log")

    def reconcile_in_background(self, *handles: Surehand) -> None:
        """Run the production reconcile loop of each handle in a thread until the test ends."""
        for sh in handles or (self.sh,):
            passes = CountedPasses(sh.reconciler)
            self.counted.append(passes)
            reconciler = cast(Reconciler, passes)  # reconcile_loop calls run_once only
            thread = threading.Thread(
                target=reconcile_loop, args=(reconciler, self.stop, INTERVAL), daemon=True
            )
            thread.start()
            self.loops.append(thread)

    def submit(self) -> str:
        result = self.sh.write_task(
            sender="PM",
            recipient="DEV",
            subject="Charge the customer",
            body="Charge acme and report the receipt.",
            client_submission_id=f"chaos-{time.monotonic_ns()}",
        )
        assert result.task_id is not None
        return result.task_id

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        wait_showing_logs(self.procs, predicate, what, timeout)

    def passes(self) -> int:
        return sum(passes.count for passes in self.counted)

    def wait_passes(self, count: int) -> None:
        """Wait (bounded) until the background reconcilers complete ``count`` more passes (one
        more than asked: a pass already under way when this is called does not count)."""
        target = self.passes() + count + 1
        self.wait(lambda: self.passes() >= target, f"{count} more reconciler passes")

    def wait_dead(self, proc: Proc) -> None:
        self.wait(lambda: proc.returncode is not None, "the worker to die")
        assert proc.returncode == -signal.SIGKILL, proc.output()[-2000:]

    # -- reading ------------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        return self.sh.get_task(task_id)

    def attempts(self, task_id: str) -> list[Attempt]:
        return self.sh.attempts(task_id)

    def operations(self, task_id: str) -> list[Operation]:
        return self.sh.operations(task_id)

    def cases(self, task_id: str) -> list[InterruptionCase]:
        return [c for c in self.sh.cases(limit=1000) if c.task_id == task_id]

    def effects(self, task_id: str) -> list[dict[str, Any]]:
        return read_effects(self.effects_path, task_id)

    def events(self, task_id: str, kind: EventKind) -> list[Any]:
        with self.store.snapshot() as connection:
            return events.history(connection, task_id, kind)

    def task_count(self) -> int:
        with self.store.snapshot() as connection:
            return task_rows.count(connection)

    def queued(self) -> int:
        """Messages waiting in the DEV queues of the broker."""
        client = redis.Redis.from_url(self.broker.url)
        try:
            return sum(
                int(client.llen(key))
                for key in client.scan_iter(match="surehand.DEV*")
                if client.type(key) == b"list"
            )
        finally:
            client.close()

    def decided(self, task_id: str) -> InterruptionCase:
        def ready() -> bool:
            found = self.cases(task_id)
            return bool(found) and found[0].admission not in (None, Admission.NOT_ADMITTED)

        self.wait(ready, f"the interruption case of {task_id} to be decided")
        [case] = self.cases(task_id)
        return case

    def close(self) -> None:
        self.stop.set()
        for thread in self.loops:
            thread.join(10)
        for proc in self.procs:
            with suppress(ProcessLookupError):
                os.killpg(proc.process.pid, signal.SIGCONT)
            proc.kill()
        for sh in self.handles:
            sh.close()


@contextmanager
def open_chaos(store: Store, tmp_path: Path, *, separate_lease_redis: bool) -> Iterator[Chaos]:
    broker = RedisServer(tmp_path / "broker")
    (tmp_path / "broker").mkdir()
    broker.start()
    lease_redis = broker
    if separate_lease_redis:
        (tmp_path / "leases").mkdir()
        lease_redis = RedisServer(tmp_path / "leases")
        lease_redis.start()
    chaos = Chaos(tmp_path, store, broker, lease_redis)
    chaos.markers.mkdir()
    try:
        yield chaos
    finally:
        chaos.close()
        broker.stop()
        lease_redis.stop()


@pytest.fixture
def chaos(store: Store, tmp_path: Path) -> Iterator[Chaos]:
    with open_chaos(store, tmp_path, separate_lease_redis=False) as built:
        yield built
