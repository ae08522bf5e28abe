"""Effect facts: what is known about an interrupted attempt's operations, and what that
evidence admits (DESIGN.md section 6). Pure functions over records; no I/O."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from surehand.agents.probes import ProbeResult, described
from surehand.model import (
    Admission,
    Attempt,
    AttemptCause,
    EffectFact,
    Operation,
    OperationState,
    RetryPolicy,
)


@dataclass(frozen=True)
class Evidence:
    """An effect fact, the admission it leads to, and the records it rests on."""

    fact: EffectFact
    admission: Admission
    refs: Mapping[str, Any] = field(default_factory=dict)
    bound_operation_id: int | None = None
    retry_at: datetime | None = None  # a retry policy's reexecute starts no sooner


def is_open(operation: Operation) -> bool:
    return operation.state is OperationState.INTENT


def probed_absent(operation: Operation) -> bool:
    return (operation.outcome or {}).get("probe") == "absent"


def confirmed_present(operation: Operation) -> bool:
    """A probe or an approver's review established that the effect happened."""
    return (
        operation.state is OperationState.SUCCEEDED
        and (operation.outcome or {}).get("probe") == "present"
    )


def unsettled(operation: Operation) -> bool:
    """What a review speaks for: an open intent, or an effect that raised and was not
    established since (by a probe or an earlier review)."""
    return operation.state in (OperationState.INTENT, OperationState.FAILED) and (
        (operation.outcome or {}).get("probe") is None
    )


def keyed(operation: Operation) -> bool:
    return operation.retry_policy is RetryPolicy.KEYED and bool(operation.idempotency_key)


def raised_unknown(operation: Operation) -> bool:
    """The effect raised: it may have happened, and nothing lets it be repeated safely."""
    return (
        operation.state is OperationState.FAILED
        and not probed_absent(operation)
        and not keyed(operation)
    )


def evaluate(
    attempt: Attempt,
    operations: Sequence[Operation],
    review: Mapping[str, Any] | None,
    unregistered: Collection[str] = (),
) -> Evidence:
    """The admission for an ended attempt: :func:`by_effects`, except that an attempt whose
    agent raised (or returned with an effect it began still open) is held for its approver
    until a review states the effect (DESIGN.md section 5: an agent failure is recorded, its
    TASK visible, nothing retried blindly)."""
    evidence = by_effects(attempt, operations, review, unregistered)
    if review is not None or attempt.cause is not AttemptCause.AGENT_FAILED:
        return evidence
    # An agent that returned with an effect still open failed too (EffectLeftOpen).
    ended = "returned with an effect still open" if attempt.agent_returned else "raised"
    why = f"the agent {ended} ({attempt.error or 'no error recorded'}); an approver reviews it"
    return Evidence(evidence.fact, Admission.HOLD_FOR_REVIEW, {**evidence.refs, "why": why})


def by_effects(
    attempt: Attempt,
    operations: Sequence[Operation],
    review: Mapping[str, Any] | None,
    unregistered: Collection[str] = (),
) -> Evidence:
    """The admission table, in order of precedence.

    ``unregistered``: probes named by open intents that the deciding process could not ask
    because they are not registered there (recorded as such, never as inconclusive).
    """
    refs = _refs(attempt, operations)
    if review is not None and review.get("effect") == "present":
        return Evidence(
            EffectFact.CONFIRMED, Admission.RECONCILE_ONLY, {**refs, "review": "present"}
        )
    open_ops = [op for op in operations if is_open(op)]
    if not operations:
        return Evidence(EffectFact.NONE_VERIFIED, Admission.REEXECUTE, refs)
    if not open_ops and attempt.agent_returned:
        return Evidence(EffectFact.CONFIRMED, Admission.RECONCILE_ONLY, refs)
    if any(raised_unknown(op) for op in operations):
        return Evidence(EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW, {**refs, "why": "raised"})
    if (
        not open_ops
        and any(confirmed_present(op) for op in operations)
        and not any(probed_absent(op) for op in operations)
    ):
        # A probe (or review) confirmed an interrupted effect, and none is known not to have
        # happened: do not run the agent again. (One established absent: a successor runs,
        # and the present ones return their recorded outcome.)
        return Evidence(
            EffectFact.CONFIRMED, Admission.RECONCILE_ONLY, {**refs, "why": "effect confirmed"}
        )
    if not open_ops:
        # Every declared effect is settled: a successor replays them from records.
        return Evidence(EffectFact.NONE_VERIFIED, Admission.REEXECUTE, {**refs, "replay": True})
    if len(open_ops) == 1 and keyed(open_ops[0]):
        bound = open_ops[0]
        return Evidence(
            EffectFact.SINGLE_VERIFIED,
            Admission.REEXECUTE,
            {**refs, "idempotency_key": bound.idempotency_key},
            bound_operation_id=bound.operation_id,
        )
    return Evidence(
        EffectFact.UNKNOWN,
        Admission.HOLD_FOR_REVIEW,
        {**refs, **_unasked(open_ops, unregistered), "why": _why(open_ops, unregistered)},
    )


def _unasked(open_ops: Sequence[Operation], unregistered: Collection[str]) -> dict[str, Any]:
    """``unregistered_probes`` when every open intent waits on a probe this process lacks:
    then a process that has them could still decide, so admission may wait for one."""
    if all(op.probe and op.probe in unregistered for op in open_ops):
        return {"unregistered_probes": sorted({op.probe for op in open_ops if op.probe})}
    return {}


def _why(open_ops: Sequence[Operation], unregistered: Collection[str]) -> str:
    missing = sorted({op.probe for op in open_ops if op.probe and op.probe in unregistered})
    if len(open_ops) > 1:
        return f"{len(open_ops)} open intents" + (
            f" ({not_registered(missing)})" if missing else ""
        )
    if missing:
        return not_registered(missing)
    if open_ops[0].probe:
        return f"probe {open_ops[0].probe!r} was inconclusive"
    if open_ops[0].idempotency_key:
        return "open intent whose retry policy does not allow a keyed repeat"
    return "open intent without key or probe"


def not_registered(probes: Sequence[str]) -> str:
    """What a decision records about probes it could not ask: never "inconclusive"."""
    if len(probes) == 1:
        return f"probe {probes[0]!r} is not registered in this process"
    return f"probes {', '.join(map(repr, probes))} are not registered in this process"


def _refs(attempt: Attempt, operations: Sequence[Operation]) -> dict[str, Any]:
    return {
        "attempt_id": attempt.attempt_id,
        "agent_returned": attempt.agent_returned,
        "operations": [
            {
                "operation_id": op.operation_id,
                "name": op.name,
                "fingerprint": op.fingerprint,
                "state": op.state.value,
                "idempotency_key": op.idempotency_key,
                "probe": op.probe,
                "confirmed": (op.outcome or {}).get("probe"),
                "confirmed_by": (op.outcome or {}).get("source"),
            }
            for op in operations
        ],
    }


def as_result(answer: bool | ProbeResult | None) -> ProbeResult:
    """A probe's answer as a :class:`ProbeResult` (an operator's probe may answer a bool)."""
    return answer if isinstance(answer, ProbeResult) else ProbeResult(answer)


def observation(op: Operation, result: ProbeResult) -> dict[str, Any]:
    """What one probe said about one operation, as the case's evidence records it."""
    return {
        "operation_id": op.operation_id,
        "probe": described(op.probe or ""),
        "answer": result.answer,
        "saw": dict(result.saw),
    }


def with_probes(evidence: Evidence, asked: Sequence[Mapping[str, Any]]) -> Evidence:
    """``evidence`` with the probes' answers (and what they saw) in its references."""
    if not asked:
        return evidence
    refs = {**evidence.refs, "probes": [dict(item) for item in asked]}
    return Evidence(evidence.fact, evidence.admission, refs, evidence.bound_operation_id)
