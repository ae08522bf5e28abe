"""Recovery admission on seeded interruption states, one test per row of the admission table.

Every test seeds what a dead session leaves in the store (a running attempt whose lease is gone,
operation intents and outcomes, a recorded agent return), drives the reconciler with a manual
clock past the grace window, and checks the interruption case, the TASK and — where a successor
is admitted — what the successor does. Both databases; leases on fakeredis and on real Redis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from surehand.agents.context import SessionContext
from surehand.model import (
    SYSTEM,
    Admission,
    AttemptState,
    Bucket,
    CaseState,
    EffectFact,
    EventKind,
    Operation,
    OperationState,
    RetryPolicy,
)
from surehand.store import Store, tasks
from surehand.testing import ManualClock
from tests.recovery_helpers import CHARGE_ARGS, GRACE_SECONDS, Rig, open_rig


def charge_key(task_id: str) -> str:
    return f"{task_id}:charge"


def charging_agent(rig: Rig) -> Callable[[SessionContext], str]:
    """Registers (and returns) a DEV agent that charges once, keyed, and reports."""

    def agent(ctx: SessionContext) -> str:
        key = charge_key(ctx.task.task_id)
        ctx.operation(
            "charge",
            CHARGE_ARGS,
            lambda: rig.ledger.perform(ctx, "charge", key),
            idempotency_key=key,
            retry_policy=RetryPolicy.KEYED,
        )
        return f"charged acme in attempt {ctx.attempt.number}"

    rig.sh.agent("DEV")(agent)
    return agent


def plain_agent(rig: Rig) -> None:
    """Registers a DEV agent that charges once without a key."""

    def agent(ctx: SessionContext) -> str:
        ctx.operation("charge", CHARGE_ARGS, lambda: rig.ledger.perform(ctx, "charge", None))
        return "charged"

    rig.sh.agent("DEV")(agent)


def task_count(rig: Rig) -> int:
    with rig.store.snapshot() as connection:
        return tasks.count(connection)


# -- none_verified ---------------------------------------------------------------------------


def test_no_intent_is_none_verified_and_one_successor_reexecutes_the_same_task(
    any_rig: Rig,
) -> None:
    rig = any_rig
    task_id, session = rig.interrupted()
    revision = rig.task(task_id).revision

    case = rig.lose(task_id)

    lost = rig.attempt(session.attempt.attempt_id)
    assert lost.state is AttemptState.SESSION_LOST
    assert lost.ended_at == rig.clock.now()
    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert case.interrupted_attempt_id == session.attempt.attempt_id
    assert case.interrupted_epoch == 1
    assert case.prior_lease_id == session.attempt.lease_id
    assert case.revision_at_interruption == revision
    assert case.revision_at_evaluation == rig.task(task_id).revision
    assert case.decided_by == "reconciler"
    assert case.decided_at == rig.clock.now()
    assert case.state is CaseState.OPEN  # until its successor is claimed
    assert case.successor_attempt_id is None
    # The TASK keeps its identity and bucket; nothing was re-run yet.
    assert rig.task(task_id).bucket is Bucket.ACTIVE
    assert rig.task(task_id).hold is None
    # Audit: the loss and the decision, with the inputs it rests on.
    [lost_event] = rig.events(task_id, EventKind.SESSION_LOST)
    assert lost_event.attempt_id == session.attempt.attempt_id
    [decision] = rig.events(task_id, EventKind.ADMISSION)
    assert decision.data["case_id"] == case.case_id
    assert decision.data["effect_fact"] == "none_verified"
    assert decision.data["admission"] == "reexecute"
    assert decision.data["inputs"]["operations"] == []
    assert decision.data["inputs"]["attempt_id"] == session.attempt.attempt_id

    charging_agent(rig)
    outcome = rig.sh.run_session(task_id)

    assert (outcome.outcome, outcome.attempt) == ("settled", 2)
    first, second = rig.attempts(task_id)
    assert (first.state, second.state) == (AttemptState.SESSION_LOST, AttemptState.SUCCEEDED)
    assert second.case_id == case.case_id
    resolved = rig.case_of(task_id)
    assert resolved.state is CaseState.RESOLVED
    assert resolved.successor_attempt_id == second.attempt_id
    assert rig.task(task_id).bucket is Bucket.REVIEW
    assert len(rig.ledger.of(task_id)) == 1
    assert task_count(rig) == 1
    # A duplicate message for the same TASK now finds nothing to claim.
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    assert len(rig.attempts(task_id)) == 2


# -- single_verified -------------------------------------------------------------------------


def test_one_open_keyed_intent_is_repeated_once_by_the_successor_with_the_same_key(
    any_rig: Rig,
) -> None:
    rig = any_rig
    task_id = rig.new_task()
    session = rig.claim(task_id)
    key = charge_key(task_id)
    intent = rig.intent(session, "charge", key=key, policy=RetryPolicy.KEYED)

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.SINGLE_VERIFIED, Admission.REEXECUTE)
    assert case.bound_operation_id == intent.operation_id
    assert case.effect_refs["idempotency_key"] == key

    charging_agent(rig)
    assert rig.sh.run_session(task_id).outcome == "settled"

    successor = rig.attempts(task_id)[1]
    assert successor.bound_operation_id == intent.operation_id
    [effect] = rig.ledger.of(task_id)
    assert (effect.attempt, effect.key) == (2, key)
    # The same operation row was handed to the successor and settled; no second row.
    [repeated] = rig.operations(task_id)
    assert repeated.operation_id == intent.operation_id
    assert repeated.idempotency_key == key
    assert repeated.state is OperationState.SUCCEEDED
    assert (repeated.attempt_id, repeated.epoch) == (successor.attempt_id, 2)
    assert rig.task(task_id).bucket is Bucket.REVIEW


# -- probes ----------------------------------------------------------------------------------


def probed_task(rig: Rig, answer: Callable[[Operation], bool | None]) -> tuple[str, Operation]:
    rig.sh.probe("gateway")(answer)
    task_id = rig.new_task()
    session = rig.claim(task_id)
    return task_id, rig.intent(session, "charge", probe="gateway")


def test_a_probe_finding_the_effect_present_confirms_it_and_reconciles_only(any_rig: Rig) -> None:
    rig = any_rig
    asked: list[int] = []

    def gateway(operation: Operation) -> bool:
        asked.append(operation.operation_id)
        return True

    task_id, intent = probed_task(rig, gateway)
    charging_agent(rig)

    case = rig.lose(task_id)

    assert asked == [intent.operation_id]
    assert (case.effect_fact, case.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert case.state is CaseState.RESOLVED
    confirmed = rig.operation(intent.operation_id)
    assert confirmed.state is OperationState.SUCCEEDED
    assert confirmed.outcome == {"probe": "present", "source": "probe:gateway"}
    # The REPORT is written from the records and the TASK submitted; nothing is re-run.
    [report] = rig.reports(task_id)
    assert "Reconciled from records" in report.body
    assert "charge [succeeded]" in report.body
    assert report.attempt_id == intent.attempt_id
    assert rig.task(task_id).bucket is Bucket.REVIEW
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    assert rig.ledger.of(task_id) == []
    assert len(rig.attempts(task_id)) == 1


def test_a_probe_finding_the_effect_absent_admits_a_successor_that_runs_it(any_rig: Rig) -> None:
    rig = any_rig
    task_id, intent = probed_task(rig, lambda _op: False)
    plain_agent(rig)

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    absent = rig.operation(intent.operation_id)
    assert absent.state is OperationState.FAILED
    assert absent.outcome == {"probe": "absent", "source": "probe:gateway"}
    assert rig.sh.run_session(task_id).outcome == "settled"
    [effect] = rig.ledger.of(task_id)
    assert effect.attempt == 2


def _raises(_op: Operation) -> bool | None:
    raise RuntimeError("gateway API is down")


@pytest.mark.parametrize(
    "answer", [lambda _op: None, _raises], ids=["inconclusive", "probe-raises"]
)
def test_a_probe_without_an_answer_holds_for_review(
    rig: Rig, answer: Callable[[Operation], bool | None]
) -> None:
    rig.sh.probe("gateway")(answer)
    task_id = rig.new_task()
    intent = rig.intent(rig.claim(task_id), "charge", probe="gateway")

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert rig.operation(intent.operation_id).state is OperationState.INTENT
    assert rig.task(task_id).hold is not None
    assert "probe 'gateway' was inconclusive" in rig.task(task_id).hold.reason  # type: ignore[union-attr]


# -- a probe that is not registered where admission runs ------------------------------------

NOT_REGISTERED = "probe 'gateway' is not registered in this process"


@contextmanager
def other_process(rig: Rig, tmp_path: Path, **overrides: Any) -> Iterator[Rig]:
    """A second handle on the same store, leases and clock: another worker's reconciler."""
    namespace = rig.sh.settings.redis_namespace
    redis_url = rig.sh.settings.redis_url
    with open_rig(
        rig.store, rig.clock, tmp_path / "other", redis_url, namespace=namespace, **overrides
    ) as other:
        yield other


def unprobed_intent(rig: Rig) -> tuple[str, Operation]:
    """A TASK lost with an open intent naming the ``gateway`` probe, which ``rig`` lacks."""
    task_id = rig.new_task()
    intent = rig.intent(rig.claim(task_id), "charge", probe="gateway")
    return task_id, intent


def test_a_probe_not_registered_here_is_recorded_so_and_the_decision_waits(rig: Rig) -> None:
    task_id, intent = unprobed_intent(rig)

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.NOT_ADMITTED)
    assert NOT_REGISTERED in case.effect_refs["why"]
    assert "waiting up to 60s for a process that has it" in case.effect_refs["why"]
    assert "inconclusive" not in case.effect_refs["why"]
    assert case.effect_refs["unregistered_probes"] == ["gateway"]
    assert case.state is CaseState.OPEN
    assert rig.task(task_id).hold is None
    assert rig.operation(intent.operation_id).state is OperationState.INTENT
    # Later passes within the wait change nothing and record nothing new.
    rig.clock.advance(30)
    rig.reconcile()
    assert rig.case_of(task_id).decided_at == case.decided_at
    assert len(rig.events(task_id, EventKind.ADMISSION)) == 1
    assert rig.sh.run_session(task_id).outcome == "not_claimed"


def test_after_the_probe_wait_the_task_is_held_naming_the_unregistered_probe(rig: Rig) -> None:
    task_id, intent = unprobed_intent(rig)
    opened = rig.lose(task_id).interrupted_at
    rig.clock.set(opened + timedelta(seconds=59))
    rig.reconcile()
    assert rig.case_of(task_id).admission is Admission.NOT_ADMITTED

    rig.clock.set(opened + timedelta(seconds=60))
    rig.reconcile()

    case = rig.case_of(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    hold = rig.task(task_id).hold
    assert hold is not None
    assert hold.case_id == case.case_id
    assert NOT_REGISTERED in hold.reason
    assert "waited 60s for a process that has it" in hold.reason
    assert "inconclusive" not in hold.reason
    assert rig.operation(intent.operation_id).state is OperationState.INTENT
    assert rig.ledger.of(task_id) == []


def test_the_probe_wait_is_a_setting(store: Store, clock: ManualClock, tmp_path: Path) -> None:
    with open_rig(store, clock, tmp_path, probe_wait_seconds=0) as rig:
        task_id, _intent = unprobed_intent(rig)

        case = rig.lose(task_id)

    assert case.admission is Admission.HOLD_FOR_REVIEW
    assert NOT_REGISTERED in case.effect_refs["why"]


@pytest.mark.parametrize(
    ("present", "admission", "effects"),
    [(True, Admission.RECONCILE_ONLY, []), (False, Admission.REEXECUTE, [2])],
    ids=["present-reconciles-only", "absent-reexecutes"],
)
def test_a_process_that_has_the_probe_decides_a_case_another_process_is_waiting_on(
    rig: Rig, tmp_path: Path, present: bool, admission: Admission, effects: list[int]
) -> None:
    task_id, intent = unprobed_intent(rig)
    assert rig.lose(task_id).admission is Admission.NOT_ADMITTED
    rig.clock.advance(10)

    with other_process(rig, tmp_path) as worker:
        worker.sh.probe("gateway")(lambda _op: present)
        plain_agent(worker)
        worker.reconcile()
        case = worker.case_of(task_id)
        if admission is Admission.REEXECUTE:
            assert worker.sh.run_session(task_id).outcome == "settled"

    assert case.admission is admission
    assert case.effect_fact is not EffectFact.UNKNOWN
    confirmed = rig.operation(intent.operation_id)
    assert confirmed.outcome == {
        "probe": "present" if present else "absent",
        "source": "probe:gateway",
    }
    assert rig.task(task_id).hold is None
    assert rig.task(task_id).bucket is Bucket.REVIEW
    assert [e.attempt for e in worker.ledger.of(task_id)] == effects


# -- confirmed: settled and returned ---------------------------------------------------------


def test_settled_operations_and_a_returned_agent_reconcile_the_report_from_records(
    any_rig: Rig,
) -> None:
    rig = any_rig
    task_id = rig.new_task()
    session = rig.claim(task_id)
    [charged] = rig.seed(session, ops=[{"name": "charge", "outcome": "ok"}], returned=True)
    charging_agent(rig)

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert case.state is CaseState.RESOLVED
    [report] = rig.reports(task_id)
    assert report.reporter == "DEV"
    assert report.recipient == "PM"
    assert '"answer": "charged acme"' in report.body  # the agent's recorded result
    assert "charge [succeeded]" in report.body
    assert case.case_id in report.body
    task = rig.task(task_id)
    assert task.bucket is Bucket.REVIEW
    submit = [e for e in rig.events(task_id, EventKind.TRANSITION) if e.action == "submit"]
    assert [(e.by, e.attempt_id) for e in submit] == [(SYSTEM, session.attempt.attempt_id)]
    assert rig.operation(charged.operation_id) == charged  # untouched
    assert rig.ledger.of(task_id) == []  # the effect is not repeated
    assert len(rig.attempts(task_id)) == 1


# -- unknown: hold ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "why"),
    [
        ([{"name": "charge"}], "open intent without key or probe"),
        (
            [{"name": "charge", "key": "k1", "policy": "none"}],
            "open intent whose retry policy does not allow a keyed repeat",
        ),
        (
            [
                {"name": "charge", "key": "k1", "policy": "keyed"},
                {"name": "email", "key": "k2", "policy": "keyed"},
            ],
            "2 open intents",
        ),
        ([{"name": "charge", "outcome": "failed"}], "raised"),
    ],
    ids=["no-key-no-probe", "key-without-keyed-policy", "two-open-intents", "effect-raised"],
)
def test_unknown_effects_hold_the_task_in_active_and_run_nothing(
    any_rig: Rig, ops: list[dict[str, str]], why: str
) -> None:
    rig = any_rig
    task_id, _session = rig.interrupted(ops=ops)
    charging_agent(rig)

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert case.effect_refs["why"] == why
    assert case.state is CaseState.OPEN
    task = rig.task(task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.hold is not None
    assert task.hold.case_id == case.case_id
    assert why in task.hold.reason
    [hold] = rig.events(task_id, EventKind.HOLD)
    assert hold.data["case_id"] == case.case_id
    # Nothing runs: no successor claim, and later passes leave the hold alone.
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    rig.clock.advance(GRACE_SECONDS * 10)
    rig.reconcile()
    assert rig.case_of(task_id).decided_at == case.decided_at
    assert rig.ledger.of(task_id) == []
    assert len(rig.attempts(task_id)) == 1


# -- not_admitted ----------------------------------------------------------------------------


def test_a_live_lease_keeps_its_owner_however_long_it_runs(any_rig: Rig) -> None:
    rig = any_rig
    task_id, session = rig.interrupted(ops=[{"name": "charge"}])
    rig.hold_lease(session)

    for _ in range(3):
        report = rig.reconcile()
        assert (report.live, report.suspected, report.lost) == (1, 0, 0)
        rig.clock.advance(GRACE_SECONDS * 100)

    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING
    assert rig.attempt(session.attempt.attempt_id).lease_missing_since is None
    assert rig.cases_of(task_id) == []
    assert rig.task(task_id).hold is None


def test_admission_on_a_case_whose_owner_still_holds_the_lease_is_not_admitted(
    any_rig: Rig,
) -> None:
    """A path that marked the attempt lost while its lease is live (e.g. a zombie session whose
    heartbeat put the lease back) gets ``not_admitted``: no successor until the lease is gone."""
    rig = any_rig
    task_id, session = rig.interrupted()
    rig.hold_lease(session)
    charging_agent(rig)

    case = rig.sh.recovery.lose(session.attempt, state=AttemptState.SESSION_LOST, by="OPS")

    assert case is not None
    assert case.admission is Admission.NOT_ADMITTED
    assert case.effect_refs == {"lease": "live"}
    assert case.state is CaseState.OPEN
    [decision] = rig.events(task_id, EventKind.ADMISSION)
    assert decision.data["admission"] == "not_admitted"
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    assert [e.data["why"] for e in rig.events(task_id, EventKind.CLAIM_REFUSED)] == ["NotClaimable"]
    rig.reconcile()
    assert rig.case_of(task_id).admission is Admission.NOT_ADMITTED

    # Once the lease is gone, the next pass decides on the evidence.
    assert rig.leases.release(task_id, session.attempt.attempt_id)
    rig.reconcile()
    assert rig.case_of(task_id).admission is Admission.REEXECUTE
    assert rig.sh.run_session(task_id).outcome == "settled"
    assert len(rig.ledger.of(task_id)) == 1


def test_a_successor_lost_before_repeating_its_bound_operation_is_bound_again(
    rig: Rig,
) -> None:
    task_id = rig.new_task()
    key = charge_key(task_id)
    intent = rig.intent(rig.claim(task_id), "charge", key=key, policy=RetryPolicy.KEYED)
    rig.lose(task_id)
    successor = rig.claim(task_id)  # attempt 2 takes the intent over, then dies too
    assert successor.attempt.bound_operation_id == intent.operation_id

    rig.clock.advance(1)
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS)
    rig.reconcile()

    first, second = rig.cases_of(task_id)
    assert (first.interrupted_epoch, second.interrupted_epoch) == (1, 2)
    assert second.effect_fact is EffectFact.SINGLE_VERIFIED
    assert second.bound_operation_id == intent.operation_id
    charging_agent(rig)
    assert rig.sh.run_session(task_id).outcome == "settled"
    [effect] = rig.ledger.of(task_id)
    assert (effect.attempt, effect.key) == (3, key)
    assert [op.operation_id for op in rig.operations(task_id)] == [intent.operation_id]


def test_a_bound_successor_cannot_repeat_its_operation_under_another_key(rig: Rig) -> None:
    """single_verified binds the successor to the recorded key: under any other key the far
    side could not recognise the repeat, so the effect is refused, not run."""
    task_id = rig.new_task()
    recorded = charge_key(task_id)
    rig.intent(rig.claim(task_id), "charge", key=recorded, policy=RetryPolicy.KEYED)
    rig.lose(task_id)

    def forgetful(ctx: SessionContext) -> str:
        fresh = f"{ctx.task.task_id}:charge:attempt-{ctx.attempt.number}"  # not the recorded key
        ctx.operation(
            "charge",
            CHARGE_ARGS,
            lambda: rig.ledger.perform(ctx, "charge", fresh),
            idempotency_key=fresh,
            retry_policy=RetryPolicy.KEYED,
        )
        return "charged"

    rig.sh.agent("DEV")(forgetful)
    outcome = rig.sh.run_session(task_id)

    assert outcome.outcome == "failed"
    assert "was admitted to run again with idempotency key" in (outcome.error or "")
    assert rig.ledger.of(task_id) == []
    [intent] = rig.operations(task_id)
    assert (intent.state, intent.idempotency_key) == (OperationState.INTENT, recorded)
