"""``write_task`` explored by a machine: retries, lost responses, kills at its crash points
(before and after the commit that writes the receipt and the TASK together) and the clock
moving, against the real store.

After every step: a submission id names at most one TASK (per tenant), every answer that is not
a conflict for one id names the same TASK, a receipt keeps the identity it was created with and
is committed with its TASK, a conflict creates nothing, and a call answers without spinning
while the clock stands still.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import func, select

from surehand.crashpoints import CrashPoint
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import _Submission, write_task
from surehand.model import ConflictCode, Disposition, Receipt, ReceiptState
from surehand.store import Store, receipts
from surehand.store import schema as tables
from surehand.testing import DEFAULT_START, ManualClock
from tests.explore_protocol import explore_settings
from tests.explore_world import Crashes, Killed, empty_store
from tests.submission_helpers import request

TENANTS = ("acme", "globex")
SUBMISSIONS = ("sub-a", "sub-b")
VARIANTS = ("Fix login", "Fix logout")  # two requests: same id, different digest
KILLS = (None, CrashPoint.WRITE_TASK_BEFORE_COMMIT, CrashPoint.WRITE_TASK_AFTER_COMMIT)
MAX_READS = 50  # receipt reads one call may make while the clock stands still


class Spinning(AssertionError):
    """A write_task call kept re-reading its receipt without answering."""


@dataclass
class Reads:
    """Counts the receipt reads of the current call (``_Submission._read``)."""

    count: int = 0

    def wrap(self, read: Callable[[Any], Receipt | None]) -> Callable[[Any], Receipt | None]:
        def counted(submission: Any) -> Receipt | None:
            self.count += 1
            if self.count > MAX_READS:
                raise Spinning(f"{self.count} receipt reads and no answer")
            return read(submission)

        return counted


@dataclass
class SubmissionWorld:
    store: Store
    crashes: Crashes
    reads: Reads


@dataclass
class Known:
    """What the callers were told about one (tenant, submission id)."""

    named: set[str] = field(default_factory=set)
    variant: int | None = None  # of the request the receipt was made from
    identity: tuple[str, str] | None = None  # the receipt's (task_id, task_path)


class SubmissionMachine(RuleBasedStateMachine):
    def __init__(self, world: SubmissionWorld) -> None:
        super().__init__()
        self.world = world
        empty_store(world.store)
        self.clock = ManualClock(DEFAULT_START)
        self.services = Services(
            store=world.store, settings=explore_settings(world.store), clock=self.clock
        )
        self.known: dict[tuple[str, str], Known] = {}
        world.crashes.armed = None

    def teardown(self) -> None:
        self.world.crashes.armed = None

    def _known(self, tenant: str, sid: str) -> Known:
        return self.known.setdefault((tenant, sid), Known())

    @rule(
        tenant=st.sampled_from(TENANTS),
        sid=st.sampled_from(SUBMISSIONS),
        variant=st.integers(0, 1),
        kill=st.sampled_from(KILLS),
        response_lost=st.booleans(),
    )
    def submit(
        self, tenant: str, sid: str, variant: int, kill: CrashPoint | None, response_lost: bool
    ) -> None:
        """A caller sends (or retries) a request; the process may die at a crash point, or the
        answer may never reach the caller."""
        known = self._known(tenant, sid)
        tasks_before = self._task_count()
        self.world.crashes.armed = kill
        self.world.reads.count = 0
        try:
            result = write_task(
                self.services,
                request(subject=VARIANTS[variant], client_submission_id=sid),
                tenant=tenant,
            )
        except Killed:
            self._learn_identity(tenant, sid, variant)
            return
        finally:
            self.world.crashes.armed = None
        self._learn_identity(tenant, sid, variant)
        if result.disposition is Disposition.CONFLICT:
            assert result.conflict is not None
            assert self._task_count() == tasks_before, "a conflict created a TASK"
            if result.conflict.code is ConflictCode.DIGEST_MISMATCH:
                assert known.variant not in (None, variant), "digest_mismatch for the same request"
            return
        assert known.variant in (None, variant), (
            f"{sid} was answered {result.disposition.value} for a request that differs from "
            "the first"
        )
        if not response_lost:
            assert result.task_id is not None
            known.named.add(result.task_id)

    def _learn_identity(self, tenant: str, sid: str, variant: int) -> None:
        """The receipt, once it exists, fixes the request and the identity for good."""
        receipt = self._receipt(tenant, sid)
        known = self._known(tenant, sid)
        if receipt is not None and known.identity is None:
            known.identity = (receipt.task_id, receipt.task_path)
            known.variant = variant if known.variant is None else known.variant

    @rule(seconds=st.sampled_from((1.0, 15.0, 30.0, 31.0)))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- reading -------------------------------------------------------------------------------

    def _receipt(self, tenant: str, sid: str) -> Receipt | None:
        with self.services.store.snapshot() as connection:
            return receipts.get(connection, tenant, sid)

    def _task_count(self) -> int:
        with self.services.store.snapshot() as connection:
            return int(
                connection.execute(select(func.count()).select_from(tables.tasks)).scalar_one()
            )

    def _tasks_named(self, tenant: str, sid: str) -> list[str]:
        with self.services.store.snapshot() as connection:
            rows = connection.execute(
                select(tables.tasks.c.task_id).where(
                    tables.tasks.c.tenant == tenant, tables.tasks.c.client_submission_id == sid
                )
            )
            return [row.task_id for row in rows]

    def _identity_of(self, task_id: str) -> tuple[str, str | None]:
        with self.services.store.snapshot() as connection:
            row = connection.execute(
                select(tables.tasks.c.tenant, tables.tasks.c.client_submission_id).where(
                    tables.tasks.c.task_id == task_id
                )
            ).one()
            return row.tenant, row.client_submission_id

    @invariant()
    def a_submission_names_one_task(self) -> None:
        for (tenant, sid), known in self.known.items():
            named = self._tasks_named(tenant, sid)
            assert len(named) <= 1, f"{tenant}/{sid} names {named}"
            assert len(known.named) <= 1, f"{tenant}/{sid} was answered with {known.named}"
            receipt = self._receipt(tenant, sid)
            if receipt is None:
                assert not named
                assert not known.named
                continue
            assert (receipt.task_id, receipt.task_path) == known.identity, (
                f"the receipt of {tenant}/{sid} changed its identity"
            )
            assert set(named) <= {receipt.task_id}
            assert known.named <= {receipt.task_id}
            for task_id in known.named:
                assert self._identity_of(task_id) == (tenant, sid), (
                    f"{tenant}/{sid} was answered with {task_id}, the TASK of "
                    f"{self._identity_of(task_id)}"
                )
            assert receipt.state is ReceiptState.COMMITTED
            assert named == [receipt.task_id], f"{tenant}/{sid} committed without its TASK"


def counting_reads(reads: Reads) -> Callable[[Any], Receipt | None]:
    return reads.wrap(_Submission._read)
