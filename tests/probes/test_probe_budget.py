"""One admission's probes share a bound in time: an agent that declares many effects with slow
probes (500 intents, each 20 s to a server of its own) cannot hold a reconciler pass -- or a
canceller's request, which admits at once -- for hours. The probes past the bound are not
asked; their effects are unknown and the TASK is held for its approver."""

from __future__ import annotations

from surehand.model import Admission, EffectFact, Operation, OperationState
from tests.recovery_helpers import Rig


def test_probes_past_the_admissions_bound_are_not_asked_and_the_task_is_held(rig: Rig) -> None:
    bound = rig.sh.settings.probe_total_seconds
    asked: list[int] = []

    def slow_gateway(operation: Operation) -> bool:
        asked.append(operation.operation_id)
        rig.clock.advance(bound / 2)  # each answer takes half the bound
        return True

    rig.sh.probe("gateway")(slow_gateway)
    task_id = rig.new_task()
    session = rig.claim(task_id)
    intents = [rig.intent(session, f"charge-{n}", probe="gateway") for n in range(5)]

    case = rig.lose(task_id)

    assert asked == [op.operation_id for op in intents[:2]]
    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    states = [rig.operation(op.operation_id).state for op in intents]
    assert states == [OperationState.SUCCEEDED] * 2 + [OperationState.INTENT] * 3
    unasked = [seen for seen in case.effect_refs["probes"] if seen["answer"] == "inconclusive"]
    assert len(unasked) == 3
    assert all("SUREHAND_PROBE_TOTAL_SECONDS" in str(seen) for seen in unasked)
    assert rig.task(task_id).hold is not None
