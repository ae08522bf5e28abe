"""Frozen records of sessions: attempts, operations (effect facts) and interruption cases.

An *attempt* is one try at running a TASK, numbered 1, 2, ... per TASK; its number is the
TASK's fencing *epoch* while it runs (``Attempt.number``, ``InterruptionCase.interrupted_epoch``
and ``Fence.epoch`` are that one number under the names the doors return). An *operation* is a
side effect a session declares before doing it (its *intent*, committed first) and settles
after (its *outcome*). An *interruption case* is the durable record of one interrupted attempt
and of the admission decision about its successor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from surehand.model.enums import (
    Admission,
    AttemptCause,
    AttemptState,
    CaseState,
    EffectFact,
    OperationState,
    RetryPolicy,
)


@dataclass(frozen=True, slots=True)
class Fence:
    """The right of one attempt to write for its TASK: it holds while the attempt is running
    and its number is still the TASK's epoch. Every session write carries one; the store
    enforces it (:mod:`surehand.store.fence`)."""

    attempt_id: str
    task_id: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try at running a TASK; ``number`` is its epoch (the name is the stored and returned
    one): the TASK's fencing epoch while it runs."""

    attempt_id: str
    task_id: str
    number: int
    state: AttemptState
    worker: str
    lease_id: str
    agent_returned: bool
    result: Any
    error: str | None
    bound_operation_id: int | None  # set for a successor admitted as single_verified
    case_id: str | None  # the interruption case that admitted this attempt as a successor
    lease_missing_since: datetime | None
    started_at: datetime
    ended_at: datetime | None
    cause: AttemptCause | None = None  # why it ended (None while running)
    # What the worker saw besides the error: ``output`` (tails), ``usage`` (the CLI's own
    # accounting), ``observed`` (how its effects were observed; absent: not observed).
    details: Mapping[str, Any] | None = None

    @property
    def fence(self) -> Fence:
        """This attempt's fence: its id, its TASK and its number as the epoch."""
        return Fence(self.attempt_id, self.task_id, self.number)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = self.state.value
        data["cause"] = self.cause.value if self.cause else None
        data["details"] = dict(self.details) if self.details is not None else None
        data["started_at"] = self.started_at.isoformat()
        data["ended_at"] = self.ended_at.isoformat() if self.ended_at else None
        data["lease_missing_since"] = (
            self.lease_missing_since.isoformat() if self.lease_missing_since else None
        )
        return data


def case_id_for(attempt: Attempt) -> str:
    """The id of the interruption case of ``attempt`` (one per attempt, so a retry finds it)."""
    return f"CASE-{attempt.task_id.removeprefix('TASK-')}-{attempt.number}"


@dataclass(frozen=True, slots=True)
class Declaration:
    """A side effect as an agent declares it before doing it: what its intent records."""

    name: str
    args: Mapping[str, Any]
    idempotency_key: str | None
    retry_policy: RetryPolicy
    probe: str | None
    probe_args: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Operation:
    """A side effect a session declared (intent) and, once done, settled (outcome)."""

    operation_id: int
    task_id: str
    attempt_id: str
    epoch: int
    name: str
    fingerprint: str
    args: Mapping[str, Any]
    idempotency_key: str | None
    retry_policy: RetryPolicy
    probe: str | None  # name of a registered probe that can tell whether the effect happened
    state: OperationState
    outcome: Mapping[str, Any] | None
    external_receipt: str | None
    error: str | None
    started_at: datetime
    settled_at: datetime | None
    # A call the hooks journaled while the agent's own declared effects were open: their ids.
    declared_within: tuple[int, ...] = ()
    # The probe's arguments, declared with the effect (validated: ``surehand.agents.probes``).
    probe_args: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["args"] = dict(self.args)
        data["declared_within"] = list(self.declared_within)
        data["probe_args"] = dict(self.probe_args) if self.probe_args is not None else None
        data["outcome"] = dict(self.outcome) if self.outcome is not None else None
        data["retry_policy"] = self.retry_policy.value
        data["state"] = self.state.value
        data["started_at"] = self.started_at.isoformat()
        data["settled_at"] = self.settled_at.isoformat() if self.settled_at else None
        return data


@dataclass(frozen=True, slots=True)
class InterruptionCase:
    """The durable record of one lost session and the admission decision about its successor."""

    case_id: str
    task_id: str
    interrupted_attempt_id: str
    interrupted_epoch: int
    prior_lease_id: str
    interrupted_at: datetime
    revision_at_interruption: int
    revision_at_evaluation: int | None
    effect_fact: EffectFact | None
    effect_refs: Mapping[str, Any]
    admission: Admission | None
    decided_at: datetime | None
    decided_by: str | None
    successor_attempt_id: str | None
    bound_operation_id: int | None
    state: CaseState
    review: Mapping[str, Any] | None
    retry_at: datetime | None = None  # a retry policy's reexecute starts no sooner

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("effect_fact", "admission", "state"):
            value = getattr(self, key)
            data[key] = value.value if value is not None else None
        for key in ("interrupted_at", "decided_at", "retry_at"):
            value = getattr(self, key)
            data[key] = value.isoformat() if value is not None else None
        data["effect_refs"] = dict(self.effect_refs)
        data["review"] = dict(self.review) if self.review is not None else None
        return data
