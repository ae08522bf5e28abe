"""What the console's pages show, read through the service layer (:class:`Surehand`) only.

Each function gathers the records one page needs from a tenant- and principal-scoped handle and
arranges them for a template. Nothing here writes: reviews go through :meth:`Surehand.review`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from surehand.dispatcher import dispatch
from surehand.dispatcher.effects import Evidence, evaluate
from surehand.dispatcher.lifecycle import approvers
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    Attempt,
    Bucket,
    CaseState,
    EventKind,
    InterruptionCase,
    Operation,
    OperationState,
    Task,
    TaskEvent,
)
from surehand.principals import Principal

# TASKs read per bucket (newest first) for the board's counts and filters; a fuller bucket shows
# its count as "300+". The service layer has no count or text query, so the board filters these.
SCAN_LIMIT = 300
SHOWN_PER_BUCKET = 50
PRIORITIES = ("P0", "P1", "P2", "P3")


@dataclass(frozen=True)
class BoardFilter:
    """The board's filters as given in the query string (already validated by the route)."""

    recipient: str | None = None
    priority: str | None = None
    text: str = ""

    def keeps(self, task: Task) -> bool:
        if self.priority and task.fields.priority.value != self.priority:
            return False
        needle = self.text.strip().casefold()
        haystack = f"{task.task_id}\n{task.fields.subject}\n{task.fields.body}".casefold()
        return not needle or needle in haystack


@dataclass(frozen=True)
class Column:
    """One bucket on the board: its TASKs (held first) and how many match."""

    bucket: str
    tasks: list[Task]
    count: int
    more: bool  # the scan reached SCAN_LIMIT: the count is a lower bound


def board(sh: Surehand, wanted: BoardFilter) -> list[Column]:
    """Every bucket's matching TASKs, newest first with held TASKs on top."""
    columns = []
    for bucket in Bucket:
        found = sh.list_tasks(bucket=bucket, recipient=wanted.recipient, limit=SCAN_LIMIT)
        kept = sorted((task for task in found if wanted.keeps(task)), key=lambda t: t.hold is None)
        more = len(found) == SCAN_LIMIT
        columns.append(Column(bucket.value, kept[:SHOWN_PER_BUCKET], len(kept), more))
    return columns


@dataclass(frozen=True)
class HeldItem:
    task: Task
    case: InterruptionCase


def held(sh: Surehand) -> list[HeldItem]:
    """Open cases held for review, with their TASKs, newest first."""
    open_cases = sh.cases(state=CaseState.OPEN, limit=SCAN_LIMIT)
    return [
        HeldItem(sh.get_task(case.task_id), case)
        for case in open_cases
        if case.admission is Admission.HOLD_FOR_REVIEW
    ]


@dataclass(frozen=True)
class TaskPage:
    """Everything ``surehand show --json`` reads about a TASK."""

    task: Task
    dispatch_note: str | None
    history: list[TaskEvent]
    reports: list[Any]
    attempts: list[Attempt]
    operations: list[Operation]
    cases: list[InterruptionCase]

    def to_dict(self) -> dict[str, Any]:
        """The same document as ``surehand show TASK --json``."""
        return {
            "task": self.task.to_dict(),
            "dispatch_note": self.dispatch_note,
            "history": [event.to_dict() for event in self.history],
            "reports": [item.to_dict() for item in self.reports],
            "attempts": [item.to_dict() for item in self.attempts],
            "operations": [item.to_dict() for item in self.operations],
            "cases": [item.to_dict() for item in self.cases],
        }


def task_page(sh: Surehand, task_id: str) -> TaskPage:
    """The TASK and its records (TaskNotFound for another tenant's, like a missing one)."""
    task = sh.get_task(task_id)
    return TaskPage(
        task=task,
        dispatch_note=dispatch.waiting_note(sh.services, task),
        history=sh.history(task.task_id),
        reports=sh.reports(task.task_id),
        attempts=sh.attempts(task.task_id),
        operations=sh.operations(task.task_id),
        cases=sh.cases(task_id=task.task_id, limit=SCAN_LIMIT),
    )


def may_review(principal: Principal, task: Task) -> bool:
    """Whether ``principal`` is one of the TASK's approvers (the review form's audience)."""
    return principal.role in approvers(task)


def approver_names(task: Task) -> str:
    """The roles that may review (and approve) ``task``, for the pages."""
    return " or ".join(sorted(approvers(task), reverse=True))


def unsettled(operation: Operation) -> bool:
    """Open (intent only) or raised with its effect unknown: what a review speaks for."""
    return operation.state in (OperationState.INTENT, OperationState.FAILED) and (
        (operation.outcome or {}).get("probe") is None
    )


@dataclass(frozen=True)
class CasePage:
    """A case with the evidence its approver needs."""

    task: Task
    case: InterruptionCase
    attempt: Attempt | None
    operations: list[Operation]
    after_present: Evidence | None
    after_absent: Evidence | None
    successor: Attempt | None

    @property
    def held(self) -> bool:
        return (
            self.case.state is CaseState.OPEN and self.case.admission is Admission.HOLD_FOR_REVIEW
        )


def case_page(sh: Surehand, case_id: str) -> CasePage:
    """The case, its TASK, the interrupted attempt and its operations, and what a successor
    would do after each answer (CaseNotFound for another tenant's case)."""
    case = sh.case(case_id)
    task = sh.get_task(case.task_id)
    attempts = {attempt.attempt_id: attempt for attempt in sh.attempts(task.task_id)}
    attempt = attempts.get(case.interrupted_attempt_id)
    ops = [op for op in sh.operations(task.task_id) if op.attempt_id == case.interrupted_attempt_id]
    held_now = case.state is CaseState.OPEN and case.admission is Admission.HOLD_FOR_REVIEW
    present = preview(attempt, ops, "present") if held_now and attempt else None
    absent = preview(attempt, ops, "absent") if held_now and attempt else None
    successor = attempts.get(case.successor_attempt_id or "")
    return CasePage(task, case, attempt, ops, present, absent, successor)


def preview(attempt: Attempt, ops: Sequence[Operation], effect: str) -> Evidence:
    """The admission a review stating ``effect`` would lead to: the review records the fact on
    every unsettled operation (as ``Recovery.review`` does), then admission evaluates it."""
    stated = [_stated(op, effect) if unsettled(op) else op for op in ops]
    return evaluate(attempt, stated, {"effect": effect})


def _stated(op: Operation, effect: str) -> Operation:
    state = OperationState.SUCCEEDED if effect == "present" else OperationState.FAILED
    return dataclasses.replace(op, state=state, outcome={"probe": effect, "source": "review"})


def consequence(evidence: Evidence, ops: Sequence[Operation]) -> str:
    """What a successor does under ``evidence``, in words."""
    rerun = [op.name for op in ops if unsettled(op)]
    if evidence.admission is Admission.RECONCILE_ONLY:
        return (
            "No new attempt: the REPORT is written from the records and the TASK moves to "
            "review. Nothing runs again."
        )
    if evidence.admission is Admission.REEXECUTE:
        again = ", ".join(rerun) or "none"
        return (
            "A successor attempt runs the agent again on the same TASK. Operations recorded "
            f"as not having happened run again when the agent declares them ({again}); "
            "settled ones return their recorded outcome."
        )
    return f"Admission answers {evidence.admission.value}: the TASK stays held."


@dataclass(frozen=True)
class Decision:
    """One admission decision of a TASK: its inputs and its output."""

    event: TaskEvent
    case: InterruptionCase | None
    review: TaskEvent | None  # the review it answered, if any

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(self.event.data.get("inputs") or {})


def audit(page: TaskPage) -> list[Decision]:
    """Every admission decision of the TASK, oldest first, each with the case it decided and
    the review (effect, note, principal) it was made on."""
    cases = {case.case_id: case for case in page.cases}
    decisions, last_review = [], {}
    for event in page.history:
        case_id = str(event.data.get("case_id", ""))
        if event.kind is EventKind.REVIEW:
            last_review[case_id] = event
        elif event.kind is EventKind.ADMISSION:
            decisions.append(Decision(event, cases.get(case_id), last_review.pop(case_id, None)))
    return decisions
