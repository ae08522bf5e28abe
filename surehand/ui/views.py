"""What the console's pages show, read through the service layer (:class:`Surehand`) only.

Each function gathers the records one page needs from a tenant- and principal-scoped handle and
arranges them for a template. Nothing here writes: reviews go through :meth:`Surehand.review`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from surehand.agents.budgets import cost_of
from surehand.dispatcher import dispatch, task_tree
from surehand.dispatcher.effects import Evidence, evaluate, unsettled
from surehand.dispatcher.lifecycle import approvers, cancellers
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    Attempt,
    CaseState,
    EventKind,
    InterruptionCase,
    Operation,
    OperationState,
    Task,
    TaskEvent,
)
from surehand.principals import Principal

CASES_PER_TASK = 300


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
    children: list[task_tree.Node] = dataclasses.field(default_factory=list)

    @property
    def held_children(self) -> list[str]:
        """ "child TASK-… held: <reason>" for each held descendant."""
        return task_tree.held_lines(self.children)

    @property
    def spent_usd(self) -> float:
        """What the TASK's attempts spent, as their agent CLIs reported it."""
        return cost_of(self.attempts)

    def to_dict(self) -> dict[str, Any]:
        """The same document as ``surehand show TASK --json``."""
        return {
            "task": self.task.to_dict(),
            "dispatch_note": self.dispatch_note,
            "children": [node.to_dict() for node in self.children],
            "held_children": self.held_children,
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
        cases=sh.cases(task_id=task.task_id, limit=CASES_PER_TASK),
        children=sh.children_tree(task.task_id),
    )


def may_review(principal: Principal, task: Task) -> bool:
    """Whether ``principal`` is one of the TASK's approvers (the review form's audience)."""
    return principal.role in approvers(task)


def may_cancel(principal: Principal, task: Task) -> bool:
    """Whether ``principal`` may cancel ``task`` now (its sender, an approver; not finished)."""
    unfinished = task.bucket.value in ("inbox", "active") and task.cancel is None
    return unfinished and principal.role in cancellers(task)


def approver_names(task: Task) -> str:
    """The roles that may review (and approve) ``task``, for the pages."""
    return " or ".join(sorted(approvers(task), reverse=True))


@dataclass(frozen=True)
class CasePage:
    """A case with the evidence its approver needs, plain words first."""

    task: Task
    case: InterruptionCase
    attempt: Attempt | None
    operations: list[Operation]
    after_present: Evidence | None
    after_absent: Evidence | None
    after_mixed: Evidence | None  # some present, some absent (several unsettled operations)
    successor: Attempt | None

    @property
    def held(self) -> bool:
        return (
            self.case.state is CaseState.OPEN and self.case.admission is Admission.HOLD_FOR_REVIEW
        )

    @property
    def unsettled(self) -> list[Operation]:
        """The operations the review answers, one answer each."""
        return [op for op in self.operations if unsettled(op)]

    @property
    def story(self) -> str:
        """What happened, in words."""
        attempt, names = self.attempt, ", ".join(op.name for op in self.unsettled)
        stopped = CAUSES.get(attempt.cause.value if attempt and attempt.cause else "", "stopped")
        what = f"attempt {attempt.number} {stopped}" if attempt else "the attempt stopped"
        if not names and not self.operations and attempt is not None:
            said = f" ({attempt.error})" if attempt.error else ""
            return (
                f"The agent's {what}{said}. It declared no effect, so a new attempt repeats "
                "nothing recorded: run it again, or stop here."
            )
        if not names:
            return f"The agent's {what}; its records do not settle the TASK."
        return (
            f"The agent's {what} while doing {names}. surehand recorded that it began "
            f"{'this effect' if len(self.unsettled) == 1 else 'these effects'} but not "
            "whether it finished, so it cannot tell whether it happened."
        )


CAUSES = {
    "session_lost": "stopped answering (its worker died or lost contact: the session was lost)",
    "lease_lost": "lost its lease and stopped",
    "agent_failed": "raised an error",
    "timed_out": "ran out of time and was stopped",
    "budget_spent": "spent its budget and was stopped",
    "store_unavailable": "could not record its progress (the database was unreachable)",
    "redis_unavailable": "could not renew its lease (Redis was unreachable)",
}


def case_page(sh: Surehand, case_id: str) -> CasePage:
    """The case, its TASK, the interrupted attempt and its operations, and what a successor
    would do after each answer (CaseNotFound for another tenant's case)."""
    case = sh.case(case_id)
    task = sh.get_task(case.task_id)
    attempts = {attempt.attempt_id: attempt for attempt in sh.attempts(task.task_id)}
    attempt = attempts.get(case.interrupted_attempt_id)
    ops = [op for op in sh.operations(task.task_id) if op.attempt_id == case.interrupted_attempt_id]
    held_now = case.state is CaseState.OPEN and case.admission is Admission.HOLD_FOR_REVIEW
    previews: list[Evidence | None] = [None, None, None]
    if held_now and attempt:
        open_ids = [op.operation_id for op in ops if unsettled(op)]
        previews = [
            preview(attempt, ops, dict.fromkeys(open_ids, "present")),
            preview(attempt, ops, dict.fromkeys(open_ids, "absent")),
            preview(attempt, ops, _mixed(open_ids)) if len(open_ids) > 1 else None,
        ]
    successor = attempts.get(case.successor_attempt_id or "")
    present, absent, mixed = previews
    return CasePage(task, case, attempt, ops, present, absent, mixed, successor)


def _mixed(open_ids: Sequence[int]) -> dict[int, str]:
    return {op_id: "present" if index == 0 else "absent" for index, op_id in enumerate(open_ids)}


def preview(attempt: Attempt, ops: Sequence[Operation], answers: Mapping[int, str]) -> Evidence:
    """The admission a review giving ``answers`` (operation id → present/absent) would lead
    to: the review records each answer on its operation (as ``reviews.review`` does), then
    admission evaluates the records."""
    stated = [
        _stated(op, answers[op.operation_id]) if op.operation_id in answers else op for op in ops
    ]
    said = set(answers.values())
    return evaluate(attempt, stated, {"effect": said.pop() if len(said) == 1 else "mixed"})


def _stated(op: Operation, effect: str) -> Operation:
    state = OperationState.SUCCEEDED if effect == "present" else OperationState.FAILED
    return dataclasses.replace(op, state=state, outcome={"probe": effect, "source": "review"})


def consequence(evidence: Evidence, ops: Sequence[Operation]) -> str:
    """What a successor does under ``evidence``, in words."""
    if evidence.admission is Admission.RECONCILE_ONLY:
        return (
            "The agent is not run again: the REPORT is built from the records and the TASK "
            "moves on to review. Nothing runs again."
        )
    if evidence.admission is Admission.REEXECUTE:
        return (
            "The agent runs again on the same TASK (a new attempt). An effect answered "
            "absent runs again when the agent declares it; one answered present, or already "
            "recorded as done, is not repeated: the agent gets its recorded outcome."
        )
    return f"Admission answers {evidence.admission.value}: the TASK stays held."


def where_to_check(task: Task, op: Operation) -> list[str]:
    """Hints of where an operation's effect would show: what identifies it, in words."""
    hints = [
        f"{op.name} with {', '.join(f'{k}={v!r}' for k, v in op.args.items()) or 'no arguments'}"
    ]
    if op.idempotency_key:
        hints.append(f"idempotency key {op.idempotency_key} (the far side may record it)")
    if op.external_receipt:
        hints.append(f"receipt {op.external_receipt}")
    hints.extend(f"the TASK's reference {ref}" for ref in task.fields.references)
    return hints


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
