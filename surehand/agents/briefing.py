"""The successor's briefing: what earlier, interrupted attempts of a TASK did, from the records.

An admitted successor (or any later attempt of a TASK that was interrupted before) starts
knowing what its predecessors declared: which effects are recorded as done (with their
receipts), which a probe or an approver's review confirmed present or absent, which failed or
stayed open, and how each interruption was decided. The command agent writes it into the
session's ``TASK.md`` as a "Recovery" section (:func:`surehand.fcop.render_recovery`) and the
session MCP tool ``recovery_brief()`` returns the same facts, so an LLM agent does not repeat
an effect that already happened. Read-only: nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from surehand.model import Attempt, InterruptionCase, Operation, OperationState, Report, Task
from surehand.model.delegation import key_of
from surehand.store import Store, cases, operations, reports, tasks

# What each recorded operation means for a successor (the ``status`` of a briefed effect).
DONE = "done"  # succeeded: never repeat it (effect_begin answers already_done)
CONFIRMED_PRESENT = "confirmed_present"  # a probe or review found it happened: never repeat
CONFIRMED_ABSENT = "confirmed_absent"  # a probe or review found it did not happen: may run
FAILED = "failed"  # the agent reported it failed: it may have happened
OPEN = "open"  # declared, outcome never recorded: it may have happened
REPEAT_WITH_KEY = "repeat_with_key"  # open, and admitted to run again with its recorded key
NOT_TO_REPEAT = frozenset({DONE, CONFIRMED_PRESENT})

INSTRUCTION = (
    "Do not repeat an effect listed as done or confirmed_present: it already happened. "
    "Declare every effect with effect_begin before doing it; when it answers already_done, "
    "use the recorded outcome instead of doing the effect again. The children listed were "
    "delegated already: delegate one again only with its key (answered reused), never anew."
)


@dataclass(frozen=True)
class BriefedEffect:
    """One operation an earlier attempt declared, as the successor should read it."""

    operation_id: int
    attempt: int
    name: str
    args: Mapping[str, Any]
    status: str
    idempotency_key: str | None
    receipt: str | None
    value: Any
    error: str | None
    confirmed_by: str | None
    # A call the hooks journaled inside the agent's own declared effects: their operation ids.
    declared_within: tuple[int, ...] = ()


@dataclass(frozen=True)
class BriefedCase:
    """One interruption of an earlier attempt and how admission decided it."""

    case_id: str
    attempt: int
    effect_fact: str | None
    admission: str | None
    review: Mapping[str, Any] | None


@dataclass(frozen=True)
class BriefedChild:
    """A TASK this TASK delegated (by any attempt): delegate again with its key and it is
    answered ``reused``, never created twice."""

    task_id: str
    key: str | None
    recipient: str
    subject: str
    bucket: str
    held: bool
    depends_on: tuple[str, ...]
    report: str | None  # the body of its latest REPORT (None before one)

    @classmethod
    def of(cls, parent_id: str, task: Task, report: Report | None) -> BriefedChild:
        return cls(
            task_id=task.task_id,
            key=key_of(parent_id, task.client_submission_id),
            recipient=task.fields.recipient,
            subject=task.fields.subject,
            bucket=task.bucket.value,
            held=task.hold is not None,
            depends_on=task.fields.depends_on,
            report=report.body if report is not None else None,
        )


@dataclass(frozen=True)
class Brief:
    """The recovery briefing of one attempt of a TASK."""

    task_id: str
    attempt: int
    interruptions: Sequence[BriefedCase]
    effects: Sequence[BriefedEffect]
    children: Sequence[BriefedChild] = ()

    @property
    def done(self) -> list[BriefedEffect]:
        """The effects a successor must not repeat."""
        return [effect for effect in self.effects if effect.status in NOT_TO_REPEAT]

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON: what ``recovery_brief()`` returns and ``TASK.md`` renders."""
        return {
            "task_id": self.task_id,
            "attempt": self.attempt,
            "recovering": bool(self.interruptions),
            "interruptions": [asdict(case) for case in self.interruptions],
            "effects": [asdict(effect) for effect in self.effects],
            "children": [asdict(child) for child in self.children],
            "instruction": INSTRUCTION,
        }


def brief_for(store: Store, task_id: str, attempt: Attempt) -> Brief:
    """The briefing for ``attempt`` of ``task_id``, from the store's records: the interruption
    cases and the operations of every earlier attempt (with the open intent admission bound
    to this attempt, if any), and the children the TASK delegated."""
    with store.snapshot() as connection:
        found = cases.for_task(connection, task_id)
        recorded = operations.for_task(connection, task_id)
        delegated = [
            (child, reports.latest_for_task(connection, child.task_id))
            for child in tasks.children(connection, task_id)
        ]
    return Brief(
        task_id=task_id,
        attempt=attempt.number,
        interruptions=[
            _case(case)
            for case in sorted(found, key=lambda c: c.interrupted_epoch)
            if case.interrupted_epoch < attempt.number
        ],
        effects=[
            _effect(op, bound=op.operation_id == attempt.bound_operation_id)
            for op in recorded
            if op.epoch < attempt.number or op.operation_id == attempt.bound_operation_id
        ],
        children=[BriefedChild.of(task_id, child, report) for child, report in delegated],
    )


def _case(case: InterruptionCase) -> BriefedCase:
    return BriefedCase(
        case_id=case.case_id,
        attempt=case.interrupted_epoch,
        effect_fact=case.effect_fact.value if case.effect_fact else None,
        admission=case.admission.value if case.admission else None,
        review=dict(case.review) if case.review else None,
    )


def _effect(op: Operation, *, bound: bool) -> BriefedEffect:
    outcome = dict(op.outcome or {})
    return BriefedEffect(
        operation_id=op.operation_id,
        attempt=op.epoch,
        name=op.name,
        args=dict(op.args),
        status=REPEAT_WITH_KEY if bound else status_of(op),
        idempotency_key=op.idempotency_key,
        receipt=op.external_receipt,
        value=outcome.get("value"),
        error=op.error,
        confirmed_by=outcome.get("source"),
        declared_within=op.declared_within,
    )


def status_of(op: Operation) -> str:
    """What a recorded operation tells a successor (one of the module's status names)."""
    probe = (op.outcome or {}).get("probe")
    if op.state is OperationState.SUCCEEDED:
        return CONFIRMED_PRESENT if probe == "present" else DONE
    if op.state is OperationState.FAILED:
        return CONFIRMED_ABSENT if probe == "absent" else FAILED
    return OPEN
