"""``effects.evaluate``: the admission table as a pure function over an attempt's records.

Three layers: one named test per row of the table in DESIGN.md section 6; every list of up to
three operations drawn from ten kinds (x agent returned x review), checked against the
contract's safety properties; and hypothesis over longer lists for the same properties plus
order independence.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from surehand.dispatcher.effects import Evidence, evaluate
from surehand.model import (
    Admission,
    Attempt,
    AttemptState,
    EffectFact,
    Operation,
    OperationState,
    RetryPolicy,
)
from tests.shared.effects import T0, op

ADMISSION_OF_FACT = {
    EffectFact.NONE_VERIFIED: Admission.REEXECUTE,
    EffectFact.SINGLE_VERIFIED: Admission.REEXECUTE,
    EffectFact.CONFIRMED: Admission.RECONCILE_ONLY,
    EffectFact.UNKNOWN: Admission.HOLD_FOR_REVIEW,
}
PRESENT = {"effect": "present", "note": "checked the gateway", "by": "PM"}
ABSENT = {"effect": "absent", "note": "no charge at the gateway", "by": "PM"}


def attempt(returned: bool = False) -> Attempt:
    return Attempt(
        attempt_id="a1",
        task_id="TASK-20261130-001",
        number=1,
        state=AttemptState.SESSION_LOST,
        worker="w",
        lease_id="a1",
        agent_returned=returned,
        result={"answer": 42} if returned else None,
        error=None,
        bound_operation_id=None,
        case_id=None,
        lease_missing_since=T0,
        started_at=T0,
        ended_at=T0,
    )


KINDS = (
    "open",
    "open_keyed",
    "open_key_policy_none",
    "open_policy_keyed_no_key",
    "open_probe",
    "succeeded",
    "raised",
    "raised_keyed",
    "probed_absent",
    "probed_present",
)
REVIEWS: tuple[Mapping[str, Any] | None, ...] = (None, PRESENT, ABSENT)


def ops_of(kinds: Sequence[str]) -> list[Operation]:
    return [op(kind, number) for number, kind in enumerate(kinds, start=1)]


# -- one test per row of the table ---------------------------------------------------------


def test_no_intent_recorded_is_none_verified_and_reexecutes() -> None:
    evidence = evaluate(attempt(), [], None)
    assert (evidence.fact, evidence.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert evidence.bound_operation_id is None
    assert evidence.refs["operations"] == []


def test_one_open_keyed_intent_is_single_verified_and_bound_to_it() -> None:
    recorded = ops_of(["succeeded", "open_keyed"])
    evidence = evaluate(attempt(), recorded, None)
    assert evidence.fact is EffectFact.SINGLE_VERIFIED
    assert evidence.admission is Admission.REEXECUTE
    assert evidence.bound_operation_id == 2
    assert evidence.refs["idempotency_key"] == "key-2"


@pytest.mark.parametrize("kind", ["open_key_policy_none", "open_policy_keyed_no_key"])
def test_a_key_without_the_keyed_policy_or_the_policy_without_a_key_holds(kind: str) -> None:
    evidence = evaluate(attempt(), ops_of([kind]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)


def test_a_probe_that_found_the_effect_present_confirms_it_and_reconciles_only() -> None:
    evidence = evaluate(attempt(), ops_of(["succeeded", "probed_present"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert evidence.refs["operations"][1]["confirmed"] == "present"
    assert evidence.refs["operations"][1]["confirmed_by"] == "probe:gateway"


def test_a_probe_that_found_the_effect_absent_lets_a_successor_run_it_again() -> None:
    evidence = evaluate(attempt(), ops_of(["succeeded", "probed_absent"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert evidence.bound_operation_id is None


def test_an_inconclusive_probe_leaves_the_intent_open_and_holds() -> None:
    evidence = evaluate(attempt(), ops_of(["open_probe"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert "inconclusive" in evidence.refs["why"]


def test_an_inconclusive_probe_is_not_reported_as_unregistered() -> None:
    evidence = evaluate(attempt(), ops_of(["open_probe"]), None, unregistered={"other"})
    assert evidence.refs["why"] == "probe 'gateway' was inconclusive"
    assert "unregistered_probes" not in evidence.refs


def test_a_probe_not_registered_where_admission_runs_is_recorded_as_not_registered() -> None:
    evidence = evaluate(attempt(), ops_of(["open_probe"]), None, unregistered={"gateway"})
    assert (evidence.fact, evidence.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert evidence.refs["why"] == "probe 'gateway' is not registered in this process"
    assert "inconclusive" not in evidence.refs["why"]
    assert evidence.refs["unregistered_probes"] == ["gateway"]


def test_an_unregistered_probe_beside_an_intent_no_probe_can_settle_is_not_waited_for() -> None:
    """Only when every open intent waits on a probe missing here could a process that has
    them decide otherwise; with an unprobed open intent as well the hold is certain."""
    evidence = evaluate(attempt(), ops_of(["open_probe", "open"]), None, unregistered={"gateway"})
    assert evidence.admission is Admission.HOLD_FOR_REVIEW
    assert (
        evidence.refs["why"] == "2 open intents (probe 'gateway' is not registered in this process)"
    )
    assert "unregistered_probes" not in evidence.refs


def test_all_settled_and_the_agent_returned_is_confirmed_and_reconciles_only() -> None:
    evidence = evaluate(attempt(returned=True), ops_of(["succeeded", "succeeded"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert evidence.refs["agent_returned"] is True


def test_all_settled_before_the_agent_returned_reexecutes_replaying_the_records() -> None:
    evidence = evaluate(attempt(), ops_of(["succeeded"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert evidence.refs["replay"] is True


def test_an_open_intent_without_key_or_probe_holds() -> None:
    evidence = evaluate(attempt(), ops_of(["open"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert evidence.refs["why"] == "open intent without key or probe"


def test_two_open_intents_hold_even_when_both_are_keyed() -> None:
    evidence = evaluate(attempt(), ops_of(["open_keyed", "open_keyed"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert evidence.refs["why"] == "2 open intents"
    assert evidence.bound_operation_id is None


def test_an_effect_that_raised_without_a_key_may_have_happened_and_holds() -> None:
    evidence = evaluate(attempt(), ops_of(["raised"]), None)
    assert (evidence.fact, evidence.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert evidence.refs["why"] == "raised"


def test_a_review_stating_present_reconciles_whatever_the_records_say() -> None:
    evidence = evaluate(attempt(), ops_of(["open", "open", "raised"]), PRESENT)
    assert (evidence.fact, evidence.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert evidence.refs["review"] == "present"


def test_refs_name_the_attempt_and_every_operation_in_order() -> None:
    recorded = ops_of(["succeeded", "open_keyed", "probed_absent"])
    refs = evaluate(attempt(), recorded, None).refs
    assert refs["attempt_id"] == "a1"
    assert [o["operation_id"] for o in refs["operations"]] == [1, 2, 3]
    assert [o["state"] for o in refs["operations"]] == ["succeeded", "intent", "failed"]
    assert refs["operations"][1]["idempotency_key"] == "key-2"


# -- properties of the contract -------------------------------------------------------------


def repeatable_by_a_successor(operation: Operation, bound: int | None) -> bool:
    """May a successor run this operation's effect (again) without guessing?"""
    outcome = operation.outcome or {}
    if operation.state is OperationState.SUCCEEDED:
        return True  # never runs again: its recorded outcome is returned
    if operation.state is OperationState.FAILED:
        keyed = operation.retry_policy is RetryPolicy.KEYED and bool(operation.idempotency_key)
        return outcome.get("probe") == "absent" or keyed
    return operation.operation_id == bound  # an open intent: only the one bound, keyed


def check_contract(
    recorded: Sequence[Operation], returned: bool, review: Mapping[str, Any] | None
) -> Evidence:
    evidence = evaluate(attempt(returned), recorded, review)
    opened = [o for o in recorded if o.state is OperationState.INTENT]
    # The fact decides the admission; evaluate never keeps an owner (that is not its input).
    assert evidence.admission is ADMISSION_OF_FACT[evidence.fact]
    # Bound to exactly one open, keyed operation iff single_verified.
    if evidence.fact is EffectFact.SINGLE_VERIFIED:
        assert len(opened) == 1
        assert evidence.bound_operation_id == opened[0].operation_id
        assert opened[0].retry_policy is RetryPolicy.KEYED
        assert opened[0].idempotency_key
        assert evidence.refs["idempotency_key"] == opened[0].idempotency_key
    else:
        assert evidence.bound_operation_id is None
    # Never blind: a successor is admitted only if every effect it could run is safe to run.
    if evidence.admission is Admission.REEXECUTE:
        assert review is None or review["effect"] != "present"
        assert all(repeatable_by_a_successor(o, evidence.bound_operation_id) for o in recorded)
    # An approver's "present" always reconciles; no evidence at all always re-executes.
    if review is not None and review["effect"] == "present":
        assert evidence.fact is EffectFact.CONFIRMED
    elif not recorded:
        assert evidence.fact is EffectFact.NONE_VERIFIED
    elif not opened and returned:
        assert evidence.fact is EffectFact.CONFIRMED
    elif len(opened) > 1:
        assert evidence.fact is EffectFact.UNKNOWN
    # The refs describe every operation the decision rests on.
    assert [o["operation_id"] for o in evidence.refs["operations"]] == [
        o.operation_id for o in recorded
    ]
    return evidence


def test_every_combination_of_up_to_three_operations_keeps_the_contract() -> None:
    checked = 0
    seen: set[tuple[EffectFact, Admission]] = set()
    for length in range(4):
        for kinds in itertools.product(KINDS, repeat=length):
            for returned in (False, True):
                for review in REVIEWS:
                    evidence = check_contract(ops_of(kinds), returned, review)
                    seen.add((evidence.fact, evidence.admission))
                    checked += 1
    assert checked == (1 + 10 + 100 + 1000) * 2 * 3
    assert seen == set(ADMISSION_OF_FACT.items())  # every row of the table is reachable


operation_lists = st.lists(st.sampled_from(KINDS), max_size=8).map(ops_of)


@settings(max_examples=400, deadline=None)
@given(
    recorded=operation_lists,
    returned=st.booleans(),
    review=st.sampled_from(REVIEWS),
    data=st.data(),
)
def test_any_operation_list_keeps_the_contract_in_any_order(
    recorded: list[Operation],
    returned: bool,
    review: Mapping[str, Any] | None,
    data: st.DataObject,
) -> None:
    evidence = check_contract(recorded, returned, review)
    shuffled = data.draw(st.permutations(recorded))
    again = evaluate(attempt(returned), shuffled, review)
    assert (again.fact, again.admission, again.bound_operation_id) == (
        evidence.fact,
        evidence.admission,
        evidence.bound_operation_id,
    )


@settings(max_examples=300, deadline=None)
@given(recorded=operation_lists.filter(bool), returned=st.booleans())
def test_an_ordinary_settled_operation_never_changes_the_decision(
    recorded: list[Operation], returned: bool
) -> None:
    before = evaluate(attempt(returned), recorded, None)
    extra = op("succeeded", len(recorded) + 1)
    after = evaluate(attempt(returned), [*recorded, extra], None)
    assert (after.fact, after.admission, after.bound_operation_id) == (
        before.fact,
        before.admission,
        before.bound_operation_id,
    )


@settings(max_examples=300, deadline=None)
@given(recorded=operation_lists, returned=st.booleans())
def test_a_second_open_intent_never_admits_a_successor(
    recorded: list[Operation], returned: bool
) -> None:
    """One more unsettled effect can only make the decision more cautious, never re-execute."""
    first, second = op("open_keyed", 101), op("open_keyed", 102)
    evidence = evaluate(attempt(returned), [*recorded, first, second], None)
    assert evidence.admission is Admission.HOLD_FOR_REVIEW
