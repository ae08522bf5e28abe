"""Seeded interruption states for the admission, reconciler and recovery tests.

A :class:`Rig` is a ``Surehand`` handle on the test store with a manual clock and a lease store
(fakeredis, or a namespace on the real Redis). It seeds the durable state an interrupted session
leaves behind — a claimed attempt, operation intents and outcomes, a recorded agent return — by
calling the same store functions a session calls, so that the reconciler and admission can be
driven step by step with the clock in hand. Agents that run successors in-process record every
effect they perform in a :class:`Ledger`, so a test can count effects and see the key each one
was given.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from surehand.agents.context import EffectResult, SessionContext
from surehand.config import Settings
from surehand.digest import operation_fingerprint
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Publisher, Services
from surehand.dispatcher.reconciler import PassReport
from surehand.dispatcher.sessions import Session
from surehand.errors import LeaseUnavailable
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    Attempt,
    Declaration,
    EventKind,
    InterruptionCase,
    Operation,
    OperationState,
    Report,
    RetryPolicy,
    Task,
    TaskEvent,
)
from surehand.queue.keys import namespace_pattern
from surehand.queue.leases import LeaseStore
from surehand.store import Store, attempts, cases, events, operations, tasks
from surehand.store import reports as report_rows
from surehand.testing import ManualClock
from tests.redis_fixtures import real_redis_url
from tests.shared.marks import marked

GRACE_SECONDS = 5.0  # lost_grace_seconds in the rig (heartbeat 1 s, so grace = 5 s)
CHARGE_ARGS: Mapping[str, Any] = {"account": "acme", "amount": 5}


@dataclass(frozen=True)
class Effect:
    """One performed effect, as an external system would have seen it."""

    task_id: str
    attempt: int
    name: str
    key: str | None


@dataclass
class Ledger:
    """Effects performed by in-process test agents (thread safe)."""

    effects: list[Effect] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def perform(self, ctx: SessionContext, name: str, key: str | None) -> EffectResult:
        with self.lock:
            self.effects.append(Effect(ctx.task.task_id, ctx.attempt.number, name, key))
        return EffectResult(value=f"{name}-done", external_receipt=f"receipt:{name}:{key}")

    def of(self, task_id: str, name: str | None = None) -> list[Effect]:
        with self.lock:
            return [
                e for e in self.effects if e.task_id == task_id and (name is None or e.name == name)
            ]


class SwitchableLeases(LeaseStore):
    """A LeaseStore that behaves as if Redis were unreachable while ``down`` is set."""

    down = False

    def _gate(self) -> None:
        if self.down:
            raise LeaseUnavailable("test: Redis is unreachable")

    def holder(self, task_id: str) -> str | None:
        self._gate()
        return super().holder(task_id)

    def holders(self, task_ids: Sequence[str]) -> dict[str, str | None]:
        self._gate()
        return super().holders(task_ids)

    def generation(self) -> str | None:
        self._gate()
        return super().generation()

    def acquire(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        self._gate()
        return super().acquire(task_id, attempt_id, ttl_ms)

    def acquire_with_generation(
        self, task_id: str, attempt_id: str, ttl_ms: int
    ) -> tuple[bool, str]:
        self._gate()
        return super().acquire_with_generation(task_id, attempt_id, ttl_ms)


@dataclass
class Rig:
    sh: Surehand
    clock: ManualClock
    ledger: Ledger = field(default_factory=Ledger)

    @property
    def services(self) -> Services:
        return self.sh.services

    @property
    def store(self) -> Store:
        return self.sh.store

    @property
    def leases(self) -> LeaseStore:
        return self.sh.leases

    # -- seeding --------------------------------------------------------------------------

    def new_task(self, sender: str = "PM", recipient: str = "DEV", **fields: Any) -> str:
        result = self.sh.write_task(
            {
                "sender": sender,
                "recipient": recipient,
                "subject": "Charge the customer",
                "body": "Charge acme 5 EUR and report the receipt.",
                "client_submission_id": f"sub-{uuid.uuid4().hex[:12]}",
                **fields,
            }
        )
        assert result.task_id is not None
        return result.task_id

    def claim(self, task_id: str) -> Session:
        session = claim(self.services, task_id, worker="seeded-worker", message_id=None)
        assert session is not None, f"{task_id} was not claimable"
        return session

    def hold_lease(self, session: Session) -> None:
        assert self.leases.acquire(session.task_id, session.attempt.attempt_id, 60_000)

    def intent(
        self,
        session: Session,
        name: str = "charge",
        *,
        args: Mapping[str, Any] = CHARGE_ARGS,
        key: str | None = None,
        policy: RetryPolicy | str = RetryPolicy.NONE,
        probe: str | None = None,
        probe_args: Mapping[str, Any] | None = None,
    ) -> Operation:
        """Commit an intent exactly as ``ctx.operation`` does before running the effect."""
        with session.fenced(f"operation_intent:{name}") as connection:
            operation_id = operations.insert_intent(
                connection,
                Declaration(name, args, key, RetryPolicy(policy), probe, probe_args),
                session.attempt,
                fingerprint=operation_fingerprint(name, args),
                now=self.clock.now(),
            )
        return self.operation(operation_id)

    def outcome(self, session: Session, op: Operation, *, ok: bool = True) -> Operation:
        """Record an outcome exactly as ``ctx.operation`` does after the effect."""
        with session.fenced("operation_outcome") as connection:
            assert operations.settle(
                connection,
                op.operation_id,
                state=OperationState.SUCCEEDED if ok else OperationState.FAILED,
                outcome={"value": f"{op.name}-done"} if ok else None,
                external_receipt=f"receipt:{op.name}" if ok else None,
                error=None if ok else "RuntimeError: gateway timeout",
                now=self.clock.now(),
            )
        return self.operation(op.operation_id)

    def interrupted(self, **seed: Any) -> tuple[str, Session]:
        """A claimed TASK whose session died after ``seed`` (see :meth:`seed`)."""
        task_id = self.new_task()
        session = self.claim(task_id)
        self.seed(session, **seed)
        return task_id, session

    def seed(
        self,
        session: Session,
        *,
        ops: Sequence[Mapping[str, Any]] = (),
        returned: bool = False,
    ) -> list[Operation]:
        """Intents (``{"name", "key", "policy", "probe", "outcome": ok|failed|None}``)."""
        seeded = []
        for number, spec in enumerate(ops):
            op = self.intent(
                session,
                spec.get("name", f"op{number}"),
                args=spec.get("args", {"n": number}),
                key=spec.get("key"),
                policy=spec.get("policy", RetryPolicy.NONE),
                probe=spec.get("probe"),
            )
            if spec.get("outcome") is not None:
                op = self.outcome(session, op, ok=spec["outcome"] == "ok")
            seeded.append(op)
        if returned:  # the agent returned and the session died before its REPORT
            with session.fenced("record_return") as connection:
                answer = {"answer": "charged acme", "receipt": "r-1"}
                attempts.record_return(connection, session.attempt.attempt_id, answer)
        return seeded

    # -- driving --------------------------------------------------------------------------

    def reconcile(self) -> PassReport:
        return self.sh.reconcile()

    def lose(self, task_id: str) -> InterruptionCase:
        """Two reconciler passes a grace window apart: suspect, then SESSION_LOST + case."""
        first = self.reconcile()
        assert first.lost == 0
        self.clock.advance(GRACE_SECONDS)
        second = self.reconcile()
        assert second.lost >= 1, second
        return self.case_of(task_id)

    # -- reading --------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        with self.store.snapshot() as connection:
            found = tasks.get(connection, task_id)
        assert found is not None
        return found

    def case_of(self, task_id: str) -> InterruptionCase:
        found = self.cases_of(task_id)
        assert len(found) == 1, found
        return found[0]

    def cases_of(self, task_id: str) -> list[InterruptionCase]:
        with self.store.snapshot() as connection:
            return cases.for_task(connection, task_id)

    def attempts(self, task_id: str) -> list[Attempt]:
        with self.store.snapshot() as connection:
            return attempts.for_task(connection, task_id)

    def attempt(self, attempt_id: str) -> Attempt:
        with self.store.snapshot() as connection:
            found = attempts.get(connection, attempt_id)
        assert found is not None
        return found

    def operation(self, operation_id: int) -> Operation:
        with self.store.snapshot() as connection:
            found = operations.get(connection, operation_id)
        assert found is not None
        return found

    def operations(self, task_id: str) -> list[Operation]:
        with self.store.snapshot() as connection:
            return operations.for_task(connection, task_id)

    def events(self, task_id: str, kind: EventKind | None = None) -> list[TaskEvent]:
        with self.store.snapshot() as connection:
            return events.history(connection, task_id, kind)

    def reports(self, task_id: str) -> list[Report]:
        with self.store.snapshot() as connection:
            return report_rows.for_task(connection, task_id)


def rig_settings(
    store: Store, redis_url: str, namespace: str, work_dir: Path, **overrides: Any
) -> Settings:
    values: dict[str, Any] = {
        "database_url": store.url,
        "redis_url": redis_url,
        "redis_namespace": namespace,
        "work_dir": work_dir,
        "lease_ttl_seconds": 3.0,
        "heartbeat_seconds": 1.0,
        "lost_grace_seconds": GRACE_SECONDS,
        **overrides,
    }
    return Settings.model_validate(values)


@contextmanager
def open_rig(
    store: Store,
    clock: ManualClock,
    tmp_path: Path,
    redis_url: str = "",
    *,
    namespace: str | None = None,
    publisher: Publisher | None = None,
    **overrides: Any,
) -> Iterator[Rig]:
    """A rig on ``store``; leases on ``redis_url`` (empty: fakeredis) in a fresh namespace
    (or ``namespace``, to share leases with another rig); ``overrides`` change settings."""
    namespace = namespace or f"test-{uuid.uuid4().hex[:16]}"
    settings = rig_settings(store, redis_url, namespace, tmp_path, **overrides)
    sh = Surehand(settings=settings, clock=clock, publisher=publisher)
    # Check the schema now: alembic is not thread safe, and tests use handles from threads.
    sh.store.ensure_schema()
    try:
        yield Rig(sh, clock)
    finally:
        if sh.runtime.built("leases"):
            _delete_namespace(sh.leases.client, namespace)
        sh.close()


def _delete_namespace(client: redis.Redis, namespace: str) -> None:
    stale = list(client.scan_iter(match=namespace_pattern(namespace), count=500))
    if stale:
        client.delete(*stale)


@pytest.fixture
def rig(
    request: pytest.FixtureRequest, store: Store, clock: ManualClock, tmp_path: Path
) -> Iterator[Rig]:
    """Both databases, leases on fakeredis; a ``rig`` marker's keywords change settings."""
    with open_rig(store, clock, tmp_path, **marked(request, "rig")) as built:
        yield built


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def any_rig(
    request: pytest.FixtureRequest, store: Store, clock: ManualClock, tmp_path: Path
) -> Iterator[Rig]:
    """Both databases, leases on fakeredis and on the real (shared, namespaced) Redis."""
    url = real_redis_url() if request.param == "redis" else ""
    with open_rig(store, clock, tmp_path, url) as built:
        yield built


def held_task(rig: Rig, sender: str = "PM", recipient: str = "DEV") -> tuple[str, Session]:
    """A TASK held for review: its session died with an open intent and no key or probe."""
    task_id = rig.new_task(sender=sender, recipient=recipient)
    session = rig.claim(task_id)
    rig.intent(session, "charge")
    case = rig.lose(task_id)
    assert case.admission is Admission.HOLD_FOR_REVIEW
    return task_id, session
