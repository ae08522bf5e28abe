"""The world the protocol explorers run in: Redis on the injected clock, kills at crash points,
an empty store per example, and the example budget.

* :class:`ModelLeases` is the real :class:`~surehand.queue.leases.LeaseStore` (the real Lua
  scripts, on fakeredis or a real redis-server) with three things a machine needs: an outage
  that starts after a chosen number of further calls (so Redis can fail in the middle of a
  reconciler pass), a lease TTL that runs on the injected clock (:meth:`ModelLeases.expire`
  deletes the keys whose TTL has passed by that clock; the keys' own Redis TTL is far longer
  than any example), and a record of what Redis answered each ``holder`` question.
* :class:`Crashes` turns a crash point (``surehand/crashpoints.py``) into an in-process kill:
  reaching the armed point raises :class:`Killed`, a ``BaseException`` no surehand code catches,
  so nothing after it runs and an open transaction is rolled back, as after a SIGKILL.
* :class:`Beat` runs a real heartbeat thread in lockstep with the machine on the injected
  clock; :class:`WorkerLeases` is one worker's view of Redis (which a partition can cut).
* :func:`empty_store` removes every row an example wrote, on SQLite and Postgres.
* :func:`budget` is the hypothesis settings: a small fixed budget in the default suite, a large
  one under ``./scripts/test --explore`` (``SUREHAND_TEST_EXPLORE_EXAMPLES``/``_STEPS``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType

import pytest
import redis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine
from sqlalchemy import delete, text

from surehand import crashpoints, dispatcher
from surehand.clock import Clock
from surehand.crashpoints import CrashPoint
from surehand.errors import LeaseLost, LeaseUnavailable
from surehand.queue.heartbeat import Heartbeat
from surehand.queue.keys import namespace_pattern
from surehand.queue.leases import LeaseStore
from surehand.store import Store
from surehand.store.schema import metadata

EXAMPLES_ENV = "SUREHAND_TEST_EXPLORE_EXAMPLES"
STEPS_ENV = "SUREHAND_TEST_EXPLORE_STEPS"
NO_SHRINK_ENV = "SUREHAND_TEST_EXPLORE_NO_SHRINK"  # set: report the first failure unshrunk
SHRINK_SECONDS_ENV = "SUREHAND_TEST_EXPLORE_SHRINK_SECONDS"  # hypothesis's shrink limit (300)
DEFAULT_EXAMPLES = 25  # per test in the default suite (each runs on 2 databases x 2 Redis)
DEFAULT_STEPS = 50
UNREACHABLE = "\0unreachable"  # what ModelLeases records when a holder question failed
REDIS_TTL_MS = 3_600_000  # the keys' own TTL: never reached within an example


def budget(
    default_steps: int = DEFAULT_STEPS, default_examples: int = DEFAULT_EXAMPLES
) -> settings:
    """Hypothesis settings for one machine: fixed and derandomised in the default suite (the
    same examples every run, so CI is reproducible); random and large under ``--explore``.
    ``default_steps``/``default_examples``: the machine's default budget (``_STEPS`` overrides
    the steps)."""
    if os.environ.get(SHRINK_SECONDS_ENV):
        # No public setting bounds shrinking time; the mutation runs need it shorter.
        engine.MAX_SHRINKING_SECONDS = int(os.environ[SHRINK_SECONDS_ENV])
    examples = os.environ.get(EXAMPLES_ENV, "")
    exploring = examples != ""
    return settings(
        max_examples=int(examples) if exploring else default_examples,
        stateful_step_count=int(os.environ.get(STEPS_ENV, default_steps)),
        deadline=None,
        derandomize=not exploring,
        database=None if not exploring else settings().database,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        phases=_UNSHRUNK if os.environ.get(NO_SHRINK_ENV) else tuple(Phase),
    )


_UNSHRUNK = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)


class Killed(BaseException):  # a kill, not an error
    """The process was killed at a crash point (raised in-process; nothing catches it)."""


@dataclass
class Crashes:
    """The crash point armed for the next call, if any; fires once."""

    armed: CrashPoint | None = None
    fired: list[CrashPoint] = field(default_factory=list)

    def __call__(self, point: CrashPoint) -> None:
        if point is self.armed:
            self.armed = None
            self.fired.append(point)
            raise Killed(point.value)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Replace ``crash_point`` in every dispatcher module that calls it (found, not
        listed: a module split moves crash points, and a list would silently miss them)."""
        for module in crash_point_modules():
            monkeypatch.setattr(module, "crash_point", self)


def crash_point_modules() -> list[ModuleType]:
    """The service-layer modules that imported ``surehand.crashpoints.crash_point``."""
    found = []
    for info in pkgutil.iter_modules(dispatcher.__path__, f"{dispatcher.__name__}."):
        module = importlib.import_module(info.name)
        if getattr(module, "crash_point", None) is crashpoints.crash_point:
            found.append(module)
    return found


class ModelLeases(LeaseStore):
    """Real leases whose TTL runs on the injected clock, with injectable outages."""

    def __init__(self, client: redis.Redis, namespace: str, clock: Clock, ttl_s: float) -> None:
        super().__init__(client, namespace)
        self.clock = clock
        self.ttl_s = ttl_s
        self.down = False
        self.fail_after: int | None = None  # calls that still succeed before the outage
        self.fail_at: str | None = None  # or: the outage starts at the next call of this name
        self.deadlines: dict[str, tuple[str, float]] = {}  # task -> (attempt, deadline)
        self.renewed: dict[str, float] = {}  # attempt -> when Redis last set its TTL
        self.answers: list[tuple[str, str | None]] = []  # (task, holder or UNREACHABLE)

    # -- the injected outage ------------------------------------------------------------------

    def _gate(self, call: str) -> None:
        if self.fail_at == call:
            self.down, self.fail_at = True, None
        if self.fail_after is not None:
            if self.fail_after == 0:
                self.down, self.fail_after = True, None
            else:
                self.fail_after -= 1
        if self.down:
            raise LeaseUnavailable("explore: Redis is unreachable")

    def now(self) -> float:
        return self.clock.now().timestamp()

    def _taken(self, task_id: str, attempt_id: str) -> None:
        moment = self.now()
        self.deadlines[task_id] = (attempt_id, moment + self.ttl_s)
        self.renewed[attempt_id] = moment

    def acquire(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        self._gate("acquire")
        taken = super().acquire(task_id, attempt_id, REDIS_TTL_MS)
        if taken:
            self._taken(task_id, attempt_id)
        return taken

    def acquire_with_generation(
        self, task_id: str, attempt_id: str, ttl_ms: int
    ) -> tuple[bool, str]:
        self._gate("acquire_with_generation")
        taken, generation = super().acquire_with_generation(task_id, attempt_id, REDIS_TTL_MS)
        if taken:
            self._taken(task_id, attempt_id)
        return taken, generation

    def renew(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        self._gate("renew")
        renewed = super().renew(task_id, attempt_id, REDIS_TTL_MS)
        if renewed:
            self._taken(task_id, attempt_id)
        return renewed

    def release(self, task_id: str, attempt_id: str) -> bool:
        self._gate("release")
        return super().release(task_id, attempt_id)

    def holder(self, task_id: str, *, evidence: bool = True) -> str | None:
        """The lease's holder; recorded when it is ``evidence`` (admission's question, not a
        heartbeat's), and only then may it be the call an outage waits for (``fail_at``)."""
        try:
            self._gate("holder" if evidence else "holder (heartbeat)")
        except LeaseUnavailable:
            if evidence:
                self.answers.append((task_id, UNREACHABLE))
            raise
        found = super().holder(task_id)
        if evidence:
            self.answers.append((task_id, found))
        return found

    def holders(self, task_ids: Sequence[str]) -> dict[str, str | None]:
        self._gate("holders")
        return super().holders(task_ids)

    def generation(self) -> str | None:
        self._gate("generation")
        return super().generation()

    def ensure_generation(self) -> str:
        self._gate("ensure_generation")
        return super().ensure_generation()

    def remaining_ms(self, task_ids: Sequence[str]) -> dict[str, int | None]:
        self._gate("remaining_ms")
        return super().remaining_ms(task_ids)

    def record_pass(self, at: float, seconds: float) -> None:
        self._gate("record_pass")
        super().record_pass(at, seconds)

    # -- what the world does to Redis, whatever the protocol thinks ---------------------------

    def truth(self, task_id: str) -> str | None:
        """Who holds the lease right now (read past any injected outage)."""
        value = self.client.get(self.key(task_id))
        return None if value is None else str(value)

    def expire(self) -> None:
        """Delete every lease whose TTL has run out by the injected clock."""
        moment = self.now()
        for task_id, (attempt_id, deadline) in list(self.deadlines.items()):
            if deadline <= moment:
                del self.deadlines[task_id]
                if self.truth(task_id) == attempt_id:
                    self.client.delete(self.key(task_id))

    def restart(self) -> None:
        """Redis restarts without persistence: every key of the namespace is gone."""
        self.wipe()
        self.deadlines.clear()

    def wipe(self) -> None:
        stale = list(self.client.scan_iter(match=namespace_pattern(self.namespace), count=500))
        if stale:
            self.client.delete(*stale)


def fresh_namespace() -> str:
    return f"explore-{uuid.uuid4().hex[:16]}"


class WorkerLeases(LeaseStore):
    """One worker's view of the leases: :class:`ModelLeases`, unless the worker is cut off
    from Redis (a partition of its own), when every call fails as an unreachable Redis does.
    Its ``holder`` questions are not recorded as evidence: those are admission's."""

    def __init__(self, leases: ModelLeases, cut_off: Callable[[], bool]) -> None:
        super().__init__(leases.client, leases.namespace)
        self.leases, self.cut_off = leases, cut_off

    def _reach(self) -> ModelLeases:
        if self.cut_off():
            raise LeaseUnavailable("explore: this worker cannot reach Redis")
        return self.leases

    def acquire(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        return self._reach().acquire(task_id, attempt_id, ttl_ms)

    def acquire_with_generation(
        self, task_id: str, attempt_id: str, ttl_ms: int
    ) -> tuple[bool, str]:
        return self._reach().acquire_with_generation(task_id, attempt_id, ttl_ms)

    def renew(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        return self._reach().renew(task_id, attempt_id, ttl_ms)

    def release(self, task_id: str, attempt_id: str) -> bool:
        return self._reach().release(task_id, attempt_id)

    def holder(self, task_id: str) -> str | None:
        return self._reach().holder(task_id, evidence=False)

    def generation(self) -> str | None:
        return self._reach().generation()

    def ensure_generation(self) -> str:
        return self._reach().ensure_generation()


_HANDOVER_S = 60.0  # a deadlock guard only: a heartbeat's tick never blocks on anything


class Beat:
    """A real :class:`Heartbeat` (its thread, its schedule, its loss decisions) on the
    injected clock, in lockstep with the machine.

    The heartbeat's ``sleep`` (a documented injection) does not sleep: it records when the
    heartbeat wants to run next (:attr:`due`, by the injected clock) and waits until the
    machine, having moved the clock there, lets it run (:meth:`run`). :meth:`run` returns once
    the heartbeat is asleep again or has declared its lease lost, so exactly one of the two
    threads runs at a time and every example is deterministic.
    """

    def __init__(
        self,
        leases: LeaseStore,
        now: Callable[[], float],
        lease: tuple[str, str, str],  # (task, attempt, generation read with the acquisition)
        ttl_s: float,
        interval: float,
        on_lost: Callable[[LeaseLost], object],
    ) -> None:
        task_id, attempt_id, generation = lease
        self._turn = threading.Condition()
        self._now = now
        self.due: float | None = None  # when it runs next; None while it runs or once ended
        self._go = False
        self.ended = False
        self.heartbeat = Heartbeat(
            leases,
            task_id,
            attempt_id,
            int(ttl_s * 1000),
            interval=interval,
            now=now,
            sleep=self._sleep,
            generation=generation,
            on_lost=lambda lost: self._lost(on_lost, lost),
        )

    def start(self) -> None:
        self.heartbeat.start()
        self._handover(lambda: self.due is not None)

    def run(self) -> None:
        """Let the heartbeat run its renewal now; back once it sleeps again or ended."""
        with self._turn:
            self._go = True
            self._turn.notify_all()
        self._handover(lambda: (self.due is not None and not self._go) or self.ended)

    def stop(self) -> None:
        """The runner's ``heartbeat.stop()`` (or the process's death): no renewal after it."""
        self.heartbeat.stop(timeout=0)  # sets its stop flag; the join comes below
        with self._turn:
            self._go = True
            self._turn.notify_all()
        self.heartbeat.stop()
        self.due, self.ended = None, True

    @property
    def lost(self) -> bool:
        return self.heartbeat.lost.is_set()

    def _sleep(self, seconds: float) -> None:  # the heartbeat's thread
        with self._turn:
            self.due, self._go = self._now() + seconds, False
            self._turn.notify_all()
            while not self._go:
                self._turn.wait()
            self.due = None

    def _lost(self, on_lost: Callable[[LeaseLost], object], lost: LeaseLost) -> None:
        on_lost(lost)
        with self._turn:
            self.ended = True
            self._turn.notify_all()

    def _handover(self, back: Callable[[], bool]) -> None:
        with self._turn:
            if not self._turn.wait_for(back, timeout=_HANDOVER_S):
                raise RuntimeError(f"the heartbeat of {self.heartbeat.task_id} never came back")


def empty_store(store: Store) -> None:
    """Remove the rows an example wrote (the key that shows row ids stays: see conftest)."""
    kept = [table for table in metadata.sorted_tables if table.name != "counters"]
    with store.engine.begin() as connection:
        # DELETE, not TRUNCATE: an example leaves a few rows, and TRUNCATE's fixed cost per
        # table on Postgres is most of an example's time.
        for table in reversed(kept):
            connection.execute(delete(table))
        connection.execute(text("DELETE FROM counters WHERE kind <> 'ROWIDS'"))
