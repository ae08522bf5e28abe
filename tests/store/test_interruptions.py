"""Interrupted, not failed: a session whose writes the store cannot confirm never settles its
TASK and never strands it (issue 10, finding 1; DESIGN.md section 5).

Faults are injected into one session write at a time, the way a killed pooled connection
(``pg_terminate_backend``) shows itself: ``before`` the write (nothing committed) or ``after``
its commit (the reply lost). A transient fault is repeated away and the session settles as if
nothing happened; a persistent one interrupts the attempt, which gets exactly one case and is
admitted by its effect facts. The reconciler's safety net is tested on seeded stranded TASKs.
Both databases; leases on fakeredis; a manual clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection

from surehand.agents.context import EffectResult, SessionContext
from surehand.dispatcher import session_settle
from surehand.dispatcher import sessions as sessions_module
from surehand.dispatcher.session_exits import SessionOutcome, interruption_in
from surehand.dispatcher.sessions import Session
from surehand.errors import SessionInterrupted, StoreUnavailable
from surehand.model import (
    Action,
    Admission,
    AttemptCause,
    AttemptState,
    Bucket,
    EffectFact,
    EventKind,
    OperationState,
    RetryPolicy,
)
from surehand.store import Store, attempts
from tests.procs import terminate_backends
from tests.recovery_helpers import GRACE_SECONDS, Rig

FENCED = Session.fenced
SETTLE_TRY = session_settle._settle_try


class Faults:
    """Which tries of which session writes fail, and how: ``plan["operation_outcome"] =
    ["after", None]`` loses the reply of the first outcome write and lets the second through;
    ``persist`` makes every try of a write fail before it commits."""

    def __init__(self) -> None:
        self.plan: dict[str, list[str | None]] = {}
        self.persist: set[str] = set()
        self.tries: dict[str, int] = {}

    def next(self, write: str) -> str | None:
        kind = write.split(":")[0]  # operation_intent:<name> -> operation_intent
        self.tries[kind] = self.tries.get(kind, 0) + 1
        if kind in self.persist:
            return "before"
        planned = self.plan.get(kind)
        return planned.pop(0) if planned else None


def _fail(mode: str | None, write: str, when: str) -> None:
    if mode == when:
        raise StoreUnavailable(f"test: connection killed {when} {write}")


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Faults:
    injected = Faults()

    @contextmanager
    def fenced(self: Session, write: str) -> Iterator[Connection]:
        mode = injected.next(write)
        _fail(mode, write, "before")
        with FENCED(self, write) as connection:
            yield connection
        _fail(mode, write, "after")  # committed; the reply is lost

    def settle_try(self: Session, result: Any, to_review: bool) -> Any:
        mode = injected.next("settle_try")
        _fail(mode, "settle_try", "before")
        settled = SETTLE_TRY(self, result, to_review)
        _fail(mode, "settle_try", "after")
        return settled

    monkeypatch.setattr(Session, "fenced", fenced)
    monkeypatch.setattr(session_settle, "_settle_try", settle_try)
    monkeypatch.setattr(sessions_module, "STORE_RETRY_DELAYS", (0.0, 0.0))  # three tries
    return injected


def charging(rig: Rig, *, key: bool = False) -> Callable[[SessionContext], str]:
    """An agent that charges once through ``ctx.operation`` (counted in the rig's ledger)."""

    def agent(ctx: SessionContext) -> str:
        idempotency_key = f"{ctx.task.task_id}:charge" if key else None
        ctx.operation(
            "charge",
            {"account": "acme", "amount": 5},
            lambda: rig.ledger.perform(ctx, "charge", idempotency_key),
            idempotency_key=idempotency_key,
            retry_policy=RetryPolicy.KEYED if key else RetryPolicy.NONE,
        )
        return "charged acme"

    rig.sh.agent("DEV")(agent)
    return agent


def run(rig: Rig, agent: Callable[[SessionContext], Any] | None = None) -> tuple[str, Any]:
    if agent is not None:
        rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    return task_id, rig.sh.run_session(task_id)


def interrupted_at(rig: Rig, faults: Faults, write: str, *, key: bool = False) -> str:
    """Run a charging session while ``write`` keeps failing; the store is back afterwards.
    Returns the TASK, whose only attempt ended interrupted by the store."""
    charging(rig, key=key)
    faults.persist.add(write)
    task_id, outcome = run(rig)
    faults.persist.clear()
    assert outcome.outcome == "interrupted"
    assert "SessionInterrupted" in (outcome.error or "")
    [attempt] = rig.attempts(task_id)
    assert (attempt.state, attempt.cause) == (
        AttemptState.INTERRUPTED,
        AttemptCause.STORE_UNAVAILABLE,
    )
    return task_id


# -- transient faults are repeated away ------------------------------------------------------


@pytest.mark.parametrize(
    ("write", "mode"),
    [
        ("operation_intent", "before"),
        ("operation_intent", "after"),
        ("operation_outcome", "before"),
        ("operation_outcome", "after"),
        ("settle", "before"),  # the settle after the return committed on its own
        ("settle", "after"),
        ("settle_try", "before"),  # a whole try of the settle: return, REPORT, move, end
        ("settle_try", "after"),
    ],
)
def test_a_write_the_store_did_not_confirm_is_repeated_and_the_session_settles_once(
    rig: Rig, faults: Faults, write: str, mode: str
) -> None:
    charging(rig)
    faults.plan[write] = [mode]

    task_id = rig.new_task()
    outcome = rig.sh.run_session(task_id)

    assert outcome == SessionOutcome(task_id, "settled", 1, "review")
    assert faults.plan[write] == []  # the fault was met
    [attempt] = rig.attempts(task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.SUCCEEDED, AttemptCause.RETURNED)
    [op] = rig.operations(task_id)  # a repeated intent adopted its own row: no second one
    assert op.state is OperationState.SUCCEEDED
    assert len(rig.ledger.of(task_id)) == 1
    assert len(rig.reports(task_id)) == 1
    assert rig.events(task_id, EventKind.STALE_OWNER_FENCED) == []
    assert rig.cases_of(task_id) == []


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
@pytest.mark.parametrize("before", ["intent", "outcome", "settle"])
def test_postgres_connections_killed_under_a_session_write_are_replaced_and_it_settles(
    rig: Rig, store: Store, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    # As many tries as in production, without the waits: each of the store's engines (one
    # per kind of write) finds its pool dead on its first use and replaces it.
    tries = len(sessions_module.STORE_RETRY_DELAYS)
    monkeypatch.setattr(sessions_module, "STORE_RETRY_DELAYS", (0.0,) * tries)
    kills: list[int] = []

    def kill(point: str) -> None:
        if point == before:
            kills.append(terminate_backends(store.url))

    def agent(ctx: SessionContext) -> str:
        kill("intent")

        def effect() -> EffectResult:
            kill("outcome")
            return rig.ledger.perform(ctx, "charge", None)

        ctx.operation("charge", {"account": "acme"}, effect)
        kill("settle")
        return "charged acme"

    task_id, outcome = run(rig, agent)

    assert kills[0] >= 1  # the pooled connections were there to kill
    assert outcome == SessionOutcome(task_id, "settled", 1, "review")
    [op] = rig.operations(task_id)
    assert op.state is OperationState.SUCCEEDED
    assert len(rig.ledger.of(task_id)) == 1


# -- persistent faults interrupt the attempt ------------------------------------------------


def test_an_intent_that_cannot_be_recorded_interrupts_the_attempt_and_a_successor_runs_it(
    rig: Rig, faults: Faults
) -> None:
    task_id = interrupted_at(rig, faults, "operation_intent")

    assert rig.ledger.of(task_id) == []  # the effect never ran without its intent
    assert rig.task(task_id).bucket is Bucket.ACTIVE
    rig.reconcile()
    case = rig.case_of(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert rig.sh.run_session(task_id).outcome == "settled"
    assert len(rig.ledger.of(task_id)) == 1


def test_an_outcome_that_cannot_be_recorded_after_the_effect_ran_is_held_for_review(
    rig: Rig, faults: Faults
) -> None:
    task_id = interrupted_at(rig, faults, "operation_outcome")

    first, second = rig.reconcile(), rig.reconcile()

    assert len(rig.ledger.of(task_id)) == 1  # the effect ran; its outcome is unknown
    [op] = rig.operations(task_id)
    assert op.state is OperationState.INTENT
    case = rig.case_of(task_id)  # exactly one, over two passes
    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    task = rig.task(task_id)
    assert (task.bucket, task.hold and task.hold.case_id) == (Bucket.ACTIVE, case.case_id)
    assert first.admissions == {"hold_for_review": 1}
    assert second.admissions == {}
    assert rig.reports(task_id) == []


def test_a_keyed_effect_whose_outcome_was_lost_is_repeated_once_under_its_key(
    rig: Rig, faults: Faults
) -> None:
    task_id = interrupted_at(rig, faults, "operation_outcome", key=True)

    rig.reconcile()

    assert rig.case_of(task_id).effect_fact is EffectFact.SINGLE_VERIFIED
    assert rig.sh.run_session(task_id).outcome == "settled"
    keys = [effect.key for effect in rig.ledger.of(task_id)]
    assert keys == [f"{task_id}:charge"] * 2  # the far side dedupes the repeat by its key


def test_a_settle_that_cannot_be_recorded_keeps_the_result_and_reconciles_the_report(
    rig: Rig, faults: Faults
) -> None:
    task_id = interrupted_at(rig, faults, "settle_try")

    rig.reconcile()

    [attempt] = rig.attempts(task_id)
    assert (attempt.agent_returned, attempt.result) == (True, "charged acme")
    case = rig.case_of(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert rig.task(task_id).bucket is Bucket.REVIEW
    [report] = rig.reports(task_id)
    assert "charged acme" in report.body
    assert len(rig.ledger.of(task_id)) == 1


def test_an_agent_that_catches_the_interruption_and_returns_is_not_settled(
    rig: Rig, faults: Faults
) -> None:
    def stubborn(ctx: SessionContext) -> str:
        try:
            ctx.operation("charge", {"n": 1}, lambda: rig.ledger.perform(ctx, "charge", None))
        except SessionInterrupted:
            return "carried on regardless"
        return "charged"

    faults.persist.add("operation_outcome")

    task_id, outcome = run(rig, stubborn)

    assert outcome.outcome == "interrupted"
    assert rig.attempts(task_id)[0].state is AttemptState.INTERRUPTED
    assert rig.reports(task_id) == []
    assert rig.task(task_id).bucket is Bucket.ACTIVE


def test_an_agent_that_wraps_the_interruption_in_its_own_error_is_interrupted_not_failed(
    rig: Rig, faults: Faults
) -> None:
    def wrapping(ctx: SessionContext) -> str:
        try:
            ctx.operation("charge", {"n": 1}, lambda: rig.ledger.perform(ctx, "charge", None))
        except Exception as error:
            raise RuntimeError("billing step failed") from error
        return "charged"

    faults.persist.add("operation_outcome")

    task_id, outcome = run(rig, wrapping)

    assert outcome.outcome == "interrupted"
    assert rig.attempts(task_id)[0].cause is AttemptCause.STORE_UNAVAILABLE


def raised(make: Callable[[], None]) -> BaseException:
    try:
        make()
    except Exception as error:
        return error
    raise AssertionError("nothing raised")


def _store_down() -> None:
    raise StoreUnavailable("connection killed")


def _wrapped(hide: bool) -> Callable[[], None]:
    def make() -> None:
        try:
            _store_down()
        except StoreUnavailable as error:
            if hide:
                raise ValueError("the agent's own words") from None
            raise ValueError("the agent's own words") from error

    return make


def test_a_store_error_anywhere_in_the_cause_chain_is_an_interruption() -> None:
    interrupted = interruption_in(raised(_wrapped(hide=False)))

    assert interrupted is not None
    assert interrupted.cause == AttemptCause.STORE_UNAVAILABLE.value
    assert interruption_in(raised(_wrapped(hide=True))) is None  # `from None`: hidden on purpose
    assert interruption_in(ValueError("the agent's own failure")) is None


def test_a_session_whose_end_cannot_be_written_either_is_lost_with_one_case_and_held(
    rig: Rig, faults: Faults
) -> None:
    charging(rig)
    faults.persist.update({"operation_outcome", "interrupt"})

    task_id, outcome = run(rig)
    faults.persist.clear()

    assert outcome.outcome == "interrupted"
    [attempt] = rig.attempts(task_id)
    assert attempt.state is AttemptState.RUNNING  # nothing could be written
    assert rig.leases.holder(task_id) is None  # released: the session is over
    assert rig.reconcile().lost == 0  # suspected only, within the grace
    rig.clock.advance(GRACE_SECONDS)
    lost = rig.reconcile()
    rig.reconcile()

    assert lost.lost == 1
    assert rig.attempts(task_id)[0].state is AttemptState.SESSION_LOST
    case = rig.case_of(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert len(rig.ledger.of(task_id)) == 1


# -- agent failures ---------------------------------------------------------------------------


def test_an_agent_failure_is_held_for_its_approver_and_runs_again_only_after_review(
    rig: Rig,
) -> None:
    def broken(ctx: SessionContext) -> str:
        raise ValueError("the spec is contradictory")

    # Its effects unobserved (like a Codex agent without hooks): its role makes one attempt.
    broken.effects_observed = None  # type: ignore[attr-defined]
    task_id, outcome = run(rig, broken)
    rig.reconcile()

    assert outcome.outcome == "failed"
    [attempt] = rig.attempts(task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.FAILED, AttemptCause.AGENT_FAILED)
    case = rig.case_of(task_id)
    assert (case.effect_fact, case.admission) == (
        EffectFact.NONE_VERIFIED,
        Admission.HOLD_FOR_REVIEW,
    )
    task = rig.task(task_id)
    assert task.hold is not None
    assert "the agent raised (ValueError: the spec is contradictory)" in task.hold.reason
    assert rig.sh.run_session(task_id).outcome == "not_claimed"  # nothing retried blindly

    charging(rig)
    reviewed = rig.sh.review(case.case_id, effect="absent", note="fixed the spec", actor="PM")

    assert reviewed.admission is Admission.REEXECUTE
    assert rig.sh.run_session(task_id).outcome == "settled"


# -- the safety net ---------------------------------------------------------------------------


def strand(rig: Rig, state: AttemptState, cause: AttemptCause | None, **seed: Any) -> str:
    """A TASK left in active as the defect left it: its attempt ended without a case."""
    task_id, session = rig.interrupted(**seed)
    with rig.store.transaction() as connection:
        assert attempts.finish(
            connection,
            session.attempt.attempt_id,
            expect=AttemptState.RUNNING,
            state=state,
            now=rig.clock.now(),
            error="StoreUnavailable: the database is unreachable",
            cause=cause,
        )
    return task_id


@pytest.mark.parametrize(
    ("state", "cause", "ops", "admission"),
    [
        (AttemptState.FAILED, None, [{"name": "charge"}], Admission.HOLD_FOR_REVIEW),
        (AttemptState.FAILED, None, [], Admission.HOLD_FOR_REVIEW),
        (
            AttemptState.INTERRUPTED,
            AttemptCause.STORE_UNAVAILABLE,
            [{"name": "charge"}],
            Admission.HOLD_FOR_REVIEW,
        ),
        (AttemptState.INTERRUPTED, AttemptCause.STORE_UNAVAILABLE, [], Admission.REEXECUTE),
    ],
)
def test_a_stranded_task_gets_one_case_for_its_last_attempt_and_is_admitted(
    rig: Rig,
    state: AttemptState,
    cause: AttemptCause | None,
    ops: list[dict[str, Any]],
    admission: Admission,
) -> None:
    task_id = strand(rig, state, cause, ops=ops)

    first, second = rig.reconcile(), rig.reconcile()

    assert (first.stranded, second.stranded) == (1, 0)
    case = rig.case_of(task_id)
    assert case.interrupted_epoch == 1
    assert case.admission is admission
    task = rig.task(task_id)
    assert task.bucket is Bucket.ACTIVE
    if admission is Admission.HOLD_FOR_REVIEW:
        assert task.hold is not None
        assert task.hold.case_id == case.case_id


def test_rework_a_running_session_and_a_held_task_are_not_stranded(rig: Rig) -> None:
    charging(rig)
    rework = rig.new_task()
    assert rig.sh.run_session(rework).outcome == "settled"
    rig.sh.transition(rework, Action.REJECT, actor="PM", reason="add the receipt number")
    running, session = rig.interrupted()
    rig.hold_lease(session)
    held = strand(rig, AttemptState.FAILED, AttemptCause.AGENT_FAILED)
    rig.reconcile()  # holds `held`

    report = rig.reconcile()

    assert report.stranded == 0
    assert rig.cases_of(rework) == []
    assert rig.cases_of(running) == []
    assert len(rig.cases_of(held)) == 1
    assert rig.sh.run_session(rework).outcome == "settled"  # rework keeps its own path


def test_a_stranded_task_rescued_by_two_reconcilers_at_once_is_held_once(rig: Rig) -> None:
    task_id = strand(rig, AttemptState.INTERRUPTED, AttemptCause.STORE_UNAVAILABLE, ops=[{}])
    [attempt] = rig.attempts(task_id)

    # The second pass read the TASK as stranded before the first opened and decided its case.
    first = rig.sh.recovery.open_case(attempt, by="reconciler", undecided_only=True)
    second = rig.sh.recovery.open_case(attempt, by="reconciler", undecided_only=True)

    assert first == second
    assert first.admission is Admission.HOLD_FOR_REVIEW
    assert len(rig.events(task_id, EventKind.HOLD)) == 1
    assert len(rig.events(task_id, EventKind.ADMISSION)) == 1


def test_a_task_whose_report_was_reconciled_from_records_can_be_sent_back_for_rework(
    rig: Rig, faults: Faults
) -> None:
    """The reconciled REPORT settled the interrupted attempt: a reject is rework, and the TASK
    runs again instead of sitting in active with neither a successor nor a case to admit one."""
    task_id = interrupted_at(rig, faults, "settle_try")
    rig.reconcile()
    assert rig.task(task_id).bucket is Bucket.REVIEW
    rig.sh.transition(task_id, Action.REJECT, actor="PM", reason="add the receipt number")

    outcome = rig.sh.run_session(task_id)

    assert (outcome.outcome, outcome.attempt) == ("settled", 2)
    assert len(rig.cases_of(task_id)) == 1
    assert len(rig.ledger.of(task_id)) == 1  # the charge is replayed from its record
    assert rig.reconcile().stranded == 0
