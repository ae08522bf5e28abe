"""Lifecycle moves between the five buckets, with authority checks and an append-only history.

A TASK's *bucket* is its lifecycle position: ``inbox`` (waiting to be claimed), ``active`` (a
session works on it, or it is held), ``review`` (returned, waiting for its approver), ``done``
and ``archive``. A *move* (an :class:`~surehand.model.Action`) takes it along one edge of
:data:`EDGES`.

Each move is one compare-and-set on the TASK row (bucket and revision as read) plus exactly
one TRANSITION event, in the caller's transaction. The store's bucket is the only "now" state
(FCoP Rule A); events are audit, never replayed to compute it (Rule G).

Authority follows DESIGN.md section 4: approve/reject/archive/reopen belong to the task's
approvers (ADMIN on tasks ADMIN sent, PM or ADMIN otherwise); submit/finish to the task's
recipient (its driver); claim to the recipient or the runtime; rollback to the runtime alone.
The runtime acts as :data:`surehand.model.SYSTEM`, which no external caller may claim to be.
A refused move raises before anything is written: it appends no event, so no caller can grow
a TASK's history by asking again and again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import Connection

from surehand.errors import (
    Conflict,
    IllegalTransition,
    NotAuthorized,
    TaskHeld,
    ValidationFailed,
)
from surehand.model import ADMIN, PM, SYSTEM, Action, Bucket, EventKind, Fence, Task
from surehand.store import dependencies, events, session_writes, task_moves
from surehand.store import reports as report_rows
from surehand.store.fence import opening, task_expectation

EDGES: dict[Action, tuple[Bucket | None, Bucket]] = {
    Action.CREATE: (None, Bucket.INBOX),
    Action.CLAIM: (Bucket.INBOX, Bucket.ACTIVE),
    Action.SUBMIT: (Bucket.ACTIVE, Bucket.REVIEW),
    Action.FINISH: (Bucket.ACTIVE, Bucket.DONE),
    Action.APPROVE: (Bucket.REVIEW, Bucket.DONE),
    Action.REJECT: (Bucket.REVIEW, Bucket.ACTIVE),
    Action.ARCHIVE: (Bucket.DONE, Bucket.ARCHIVE),
    Action.ROLLBACK: (Bucket.ACTIVE, Bucket.INBOX),
    Action.REOPEN: (Bucket.DONE, Bucket.ACTIVE),
    # Cancel ends a TASK that has not finished: from active (its session stopped, the attempt
    # through admission) or, without any session, from inbox (:data:`OTHER_SOURCES`).
    Action.CANCEL: (Bucket.ACTIVE, Bucket.ARCHIVE),
    # The runtime's, for a session that waits for its children (delegation.wait_for): the
    # TASK goes back to inbox, unpublished, and is claimed again once they are done.
    Action.WAIT: (Bucket.ACTIVE, Bucket.INBOX),
}
# Actions whose one target is reached from more than one bucket.
OTHER_SOURCES: dict[Action, frozenset[Bucket]] = {Action.CANCEL: frozenset({Bucket.INBOX})}
APPROVER_ACTIONS = frozenset({Action.APPROVE, Action.REJECT, Action.ARCHIVE, Action.REOPEN})
DRIVER_ACTIONS = frozenset({Action.SUBMIT, Action.FINISH})
REASON_REQUIRED = frozenset({Action.REJECT, Action.ARCHIVE, Action.REOPEN, Action.CANCEL})
REPORT_REQUIRED = frozenset({Action.SUBMIT, Action.FINISH})
REWORK_ACTIONS = frozenset({Action.REJECT, Action.REOPEN})


def sources(action: Action) -> frozenset[Bucket | None]:
    """The buckets ``action`` moves a TASK from."""
    return frozenset({EDGES[action][0], *OTHER_SOURCES.get(action, ())})


def allowed_actions(bucket: Bucket) -> list[Action]:
    """The actions whose edge starts at ``bucket``, in table order."""
    return [action for action in EDGES if bucket in sources(action)]


def cancellers(task: Task) -> frozenset[str]:
    """Who may cancel: the TASK's sender and its approvers (ADMIN always among them)."""
    return approvers(task) | {task.fields.sender}


def approvers(task: Task) -> frozenset[str]:
    """Who may approve, reject, archive or reopen: ADMIN alone on the main line (tasks ADMIN
    sent), PM or ADMIN on branch lines (ADMIN always keeps the last word)."""
    return frozenset({ADMIN}) if task.fields.sender == ADMIN else frozenset({PM, ADMIN})


def _authorised(task: Task, action: Action) -> frozenset[str]:
    """The roles (besides the runtime) that may perform ``action`` on ``task``."""
    if action in APPROVER_ACTIONS:
        return approvers(task)
    if action is Action.CANCEL:
        return cancellers(task)
    if action in DRIVER_ACTIONS or action is Action.CLAIM:
        return frozenset({task.fields.recipient})
    return frozenset()  # rollback, wait: the runtime's moves only


def check_edge(task: Task, action: Action) -> Bucket:
    """The destination bucket, or IllegalTransition naming what is allowed from here."""
    source, target = EDGES[action]
    if task.bucket in sources(action):
        return target
    allowed = allowed_actions(task.bucket)
    names = ", ".join(a.value for a in allowed) or "none"
    origin = source.value if source is not None else "nowhere (a new TASK)"
    raise IllegalTransition(
        f"cannot {action.value} {task.task_id}: {action.value} moves {origin} -> "
        f"{target.value}, but the TASK is in {task.bucket.value}; allowed from "
        f"{task.bucket.value}: {names}",
        action=action.value,
        bucket=task.bucket.value,
        allowed=[a.value for a in allowed],
    )


def check_authority(task: Task, action: Action, by: str) -> None:
    """Refuse ``by`` unless it may perform ``action``; the runtime (SYSTEM) always may."""
    if by == SYSTEM:
        return
    allowed = _authorised(task, action)
    if by not in allowed:
        who = ", ".join(sorted(allowed)) or f"the runtime ({SYSTEM})"
        raise NotAuthorized(
            f"{by} may not {action.value} {task.task_id}; only {who} may",
            actor=by,
            action=action.value,
            allowed=sorted(allowed),
        )


def _check_reason(action: Action, reason: str | None) -> str | None:
    """A stripped reason; reject/archive/reopen need one (it is the audit trail's why)."""
    text = reason.strip() if reason is not None else ""
    if action in REASON_REQUIRED and not text:
        raise ValidationFailed("reason", f"{action.value} needs a non-blank reason")
    return text or None


def _check_report(
    connection: Connection,
    task: Task,
    action: Action,
    report_id: str | None,
    report_written: bool = False,
) -> str | None:
    """The REPORT a submit/finish cites: the one named, or the task's latest."""
    if action not in REPORT_REQUIRED:
        return report_id
    if report_id is not None and report_written:
        return report_id  # the caller wrote (or found) it on this TASK in this transaction
    if report_id is not None:
        report = report_rows.get(connection, report_id)
        if report is None or report.task_id != task.task_id:
            raise ValidationFailed("report_id", f"{report_id} is not a REPORT on {task.task_id}")
        return report_id
    latest = report_rows.latest_for_task(connection, task.task_id)
    if latest is None:
        raise IllegalTransition(
            f"cannot {action.value} {task.task_id}: it has no REPORT yet; its recipient "
            "writes one with write_report first",
            action=action.value,
            bucket=task.bucket.value,
            missing="report",
        )
    return latest.report_id


def _check_hold(task: Task, action: Action) -> None:
    if task.hold is not None:
        raise TaskHeld(
            f"cannot {action.value} {task.task_id}: it is held for review "
            f"({task.hold.reason or 'interrupted session'}); an approver must review case "
            f"{task.hold.case_id} first",
            case_id=task.hold.case_id,
        )


class Fencing(Enum):
    """How a move's :class:`~surehand.model.Fence` (its attempt and epoch) bears on it."""

    HELD = "held"  # a session's own move: the TASK's epoch must still be the fence's
    OPENS = "opens"  # a claim: the TASK's epoch moves from the one read to the fence's
    RECORDED = "recorded"  # after the fact (admission, cancel): the event names it, no check


@dataclass(frozen=True)
class Move:
    """One move of a TASK by ``action``: who makes it, when, why, what it cites, and under
    which attempt.

    ``report_written``: the caller wrote or found ``report_id`` on this TASK in the same
    transaction, so it is not looked up again. ``acting``: who acted for ``by`` (an ADMIN
    principal acting as another role), recorded in the event's data. ``fence``: the attempt
    and epoch the move is made under, checked as ``fencing`` says. ``unpublished``: the TASK
    goes back unpublished, for the sweep (a rollback, a wait).
    """

    action: Action
    by: str
    now: datetime
    reason: str | None = None
    report_id: str | None = None
    report_written: bool = False
    acting: Mapping[str, Any] | None = None
    fence: Fence | None = None
    fencing: Fencing = Fencing.HELD
    unpublished: bool = False


def apply(connection: Connection, task: Task, move: Move) -> Task:
    """Make ``move`` on ``task`` inside the caller's transaction and return the TASK as written.

    Validates the edge, the hold, the actor's authority, the reason and the cited REPORT, then
    compare-and-sets the row against the bucket and revision it was read at (plus the fence's
    epoch: :func:`surehand.store.fence.task_expectation`); Conflict if anything changed since.
    """
    action = move.action
    target = check_edge(task, action)
    _check_hold(task, action)
    check_authority(task, action, move.by)
    move = replace(move, reason=_check_reason(action, move.reason))
    cited = _check_report(connection, task, action, move.report_id, move.report_written)
    expect, fenced = _fencing(task, move)
    values = {**_values(task, action, target, move.unpublished), **fenced}
    moved = _compare_and_set(connection, task, values, expect, move.now)
    if target is Bucket.DONE:
        dependencies.unhold_done(connection, moved, move.now)
        dependencies.release(connection, task.task_id, move.now)
    elif target is Bucket.ARCHIVE:  # it will never be done: its waiting dependants are held
        dependencies.hold_dependants(connection, moved, dependencies.dead_why(moved), move.now)
    data = {**_event_data(action, values, cited), **(move.acting or {})}
    events.insert(connection, move_event(task.task_id, move, (task.bucket, target), data))
    return moved


def _fencing(task: Task, move: Move) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the compare-and-set expects and writes for the move's fence."""
    if move.fence is None or move.fencing is Fencing.RECORDED:
        return {}, {}
    if move.fencing is Fencing.OPENS:
        return opening(move.fence, task.epoch)
    return task_expectation(move.fence), {}


def move_event(
    task_id: str, move: Move, edge: tuple[Bucket | None, Bucket], data: dict[str, Any]
) -> dict[str, Any]:
    """The row of a move's TRANSITION event from ``edge[0]`` to ``edge[1]`` (every move path
    appends exactly this shape); it names the move's attempt and epoch, if it has a fence."""
    fence = move.fence
    return events.row(
        task_id=task_id,
        kind=EventKind.TRANSITION,
        by=move.by,
        at=move.now,
        action=move.action.value,
        from_bucket=edge[0],
        to_bucket=edge[1],
        reason=move.reason,
        attempt_id=fence.attempt_id if fence is not None else None,
        epoch=fence.epoch if fence is not None else None,
        data=data,
    )


def settle_event(task_id: str, move: Move) -> dict[str, Any]:
    """The TRANSITION event :func:`apply` appends for a session's submit/finish ``move`` of
    its active TASK, citing the REPORT the same write wrote (for the one-statement settle,
    which makes the move in SQL: ``dispatcher/settling.py``)."""
    source, target = EDGES[move.action]
    assert move.action in REPORT_REQUIRED
    assert move.report_id is not None
    assert source is Bucket.ACTIVE
    data = _event_data(move.action, {}, move.report_id)
    return move_event(task_id, move, (source, target), data)


def claim(
    connection: Connection, task_id: str, *, now: datetime, attempt_id: str, worker: str
) -> Task | None:
    """The runtime's claim of an unheld ``inbox`` TASK, for the session hot path.

    The same move as ``apply(task, Move(Action.CLAIM, by=SYSTEM, fence=Fence(attempt_id,
    task_id, next_epoch(e)), fencing=Fencing.OPENS))`` on a TASK read under its lock --
    edge from :data:`EDGES`, no hold, epoch and revision bumped, one TRANSITION event -- plus
    the running attempt, but without the read: the UPDATE's WHERE is the check (one statement
    on Postgres). Returns the TASK as written, or None when it was not claimable as an unheld
    inbox TASK (nothing written; the caller reads it and goes the long way, which explains
    the refusal).
    """
    source, target = EDGES[Action.CLAIM]
    assert (source, target) == (Bucket.INBOX, Bucket.ACTIVE)  # what task_moves.CLAIM_INBOX does
    data = _event_data(Action.CLAIM, {}, None)
    # The statement opens the fence: it fills in the event's epoch.
    event = move_event(task_id, Move(Action.CLAIM, by=SYSTEM, now=now), (source, target), data)
    event = {**event, "attempt_id": attempt_id}
    return session_writes.claim_fresh(
        connection, task_id=task_id, attempt_id=attempt_id, worker=worker, now=now, event=event
    )


def _values(task: Task, action: Action, target: Bucket, unpublished: bool) -> dict[str, Any]:
    values: dict[str, Any] = {"bucket": target.value}
    if action in REWORK_ACTIONS:
        # A new rework round makes a resubmitted identical REPORT a new revision, not a dup;
        # unpublished, so that the dispatcher sweep sends the rework to a worker.
        values["rework_round"] = task.rework_round + 1
        values["published"] = False
    if unpublished:
        values["published"] = False
    return values


def _event_data(action: Action, values: Mapping[str, Any], report_id: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if report_id is not None:
        data["report_id"] = report_id
    if action in REWORK_ACTIONS:
        data["rework_round"] = values["rework_round"]
    return data


def _compare_and_set(
    connection: Connection,
    task: Task,
    values: Mapping[str, Any],
    fenced: Mapping[str, Any],
    now: datetime,
) -> Task:
    expect = {"bucket": task.bucket.value, "revision": task.revision, **fenced}
    moved = task_moves.update_returning(
        connection, task.task_id, expect=expect, values=values, now=now
    )
    if moved is None:
        raise Conflict(
            f"{task.task_id} changed since revision {task.revision} was read; re-read it and "
            "decide again",
            task_id=task.task_id,
        )
    return moved
