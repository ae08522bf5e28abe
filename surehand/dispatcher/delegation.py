"""Delegation: a session creates child TASKs for other roles, once across its successors.

A child is an ordinary TASK created by ``write_task``: sent by the session TASK's recipient,
in its tenant and thread, with ``parent`` set to it. Its ``client_submission_id`` is
``delegate:<parent TASK>:<key>`` -- the key the agent gives, or one derived from the request
itself -- and never names the attempt, so a successor that repeats its predecessor's call
(whose answer was lost with it) gets ``reused`` and the same child, and a changed request under
the same key is the typed ``conflict`` (seed 000's promise, for agents). The creation is a
session write: it commits only in a transaction that the session's fence holds
(``Session.fenced``), so an attempt that no longer owns its TASK creates nothing
(``StaleOwner``). A child may depend on its siblings only (``depends_on``); a sibling that is
not done keeps it in ``inbox`` (dependencies are enforced by the claim).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from surehand.agents.briefing import brief_for
from surehand.call_requests import DelegateRequest, parse
from surehand.crashpoints import CrashPoint, crash_point
from surehand.digest import request_digest
from surehand.dispatcher.sessions import Session
from surehand.dispatcher.submissions import write_task
from surehand.errors import SessionLimitReached, ValidationFailed
from surehand.model import Bucket, Task, WriteTaskResult
from surehand.model.delegation import submission_id
from surehand.requests import parse_task_request
from surehand.store import dependencies, tasks


def delegate(session: Session, arguments: Mapping[str, Any]) -> WriteTaskResult:
    """Create (or find again) the child TASK ``arguments`` describe, as ``session``'s TASK's
    recipient; the result is ``write_task``'s (``created``, ``reused`` or ``conflict``).

    ValidationFailed names a bad field (a ``depends_on`` that is no sibling among them);
    StaleOwner (recorded) when the session no longer owns its TASK."""
    with session.fenced("delegate"):
        pass  # a stale attempt learns it before anything else is read for it
    request = parse(DelegateRequest, **dict(arguments))
    parent = session.task
    payload = _child_request(parent, request)
    key = request.key or _derived_key(payload)
    payload["client_submission_id"] = submission_id(parent.task_id, key)
    _check_siblings(session, request.depends_on)
    _check_depth(session)
    result = write_task(
        session.services,
        payload,
        tenant=parent.tenant,
        writer=lambda: session.fenced("delegate"),
    )
    crash_point(CrashPoint.SESSION_AFTER_DELEGATE)
    return result


def _child_request(parent: Task, request: DelegateRequest) -> dict[str, Any]:
    return {
        "sender": parent.fields.recipient,
        "recipient": request.recipient,
        "subject": request.subject,
        "body": request.body,
        "priority": request.priority,
        "thread_key": parent.fields.thread_key,
        "parent": parent.task_id,
        "references": list(request.references),
        "depends_on": list(request.depends_on),
        "risk_level": request.risk_level,
    }


def _derived_key(payload: Mapping[str, Any]) -> str:
    """No key given: the request is its own key (its canonical digest), so the identical call
    of a successor finds the same child."""
    fields = parse_task_request(payload).to_fields()
    return f"req-{request_digest(fields)[:32]}"


def _check_siblings(session: Session, depends_on: list[str]) -> None:
    if not depends_on:
        return
    with session.services.store.snapshot() as connection:
        found = {d: tasks.get(connection, d, session.task.tenant) for d in depends_on}
    strangers = [
        d for d, task in found.items() if task is None or task.fields.parent != session.task_id
    ]
    if strangers:
        raise ValidationFailed(
            "depends_on",
            f"{', '.join(strangers)} is no child of {session.task_id}: a delegated TASK may "
            "depend only on its siblings (delegate them first, then name their task_id)",
        )


def _check_depth(session: Session) -> None:
    """Refuse a child deeper than ``delegation_max_depth`` generations (SessionLimitReached)."""
    limit = session.services.settings.delegation_max_depth
    ancestors, parent = 0, session.task.fields.parent
    with session.services.store.snapshot() as connection:
        while parent and ancestors < limit:
            found = tasks.get(connection, parent, session.task.tenant)
            parent = found.fields.parent if found is not None else ""
            ancestors += 1
    if ancestors >= limit:
        raise SessionLimitReached(
            f"{session.task_id} is {ancestors} generations deep already "
            "(SUREHAND_DELEGATION_MAX_DEPTH): it cannot delegate; do the work itself or "
            "report what should be delegated",
            limit="delegation_max_depth",
        )


# A child in archive was done before (done -> archive is its only way there).
_SETTLED = frozenset({Bucket.DONE, Bucket.ARCHIVE})


def wait_for(session: Session, children: Sequence[str]) -> dict[str, Any]:
    """End ``session`` waiting for ``children`` (task ids of its TASK's children; empty: all of
    them) without holding a worker: in one fenced transaction the TASK waits for them as for
    dependencies (``task_dependencies``), goes back to ``inbox`` unpublished, and the attempt
    ends (succeeded). The move to done of the last of them queues the TASK again (the claim
    makes a new attempt, briefed with the children and their REPORTs). Answers ``waiting``, or
    ``ready`` (nothing written) when they are all done already or one is held (a held child
    would not be done before its approver acts: the parent decides now).

    ValidationFailed (``children``) for a TASK that is no child; StaleOwner when fenced."""
    named = list(dict.fromkeys(children))
    with session.fenced("wait_for") as connection:
        mine = {t.task_id: t for t in tasks.children(connection, session.task_id, lock=True)}
        named = named or list(mine)
        strangers = [c for c in named if c not in mine]
        if strangers or not named:
            raise ValidationFailed("children", _not_children(session.task_id, strangers))
        held = [c for c in named if mine[c].hold is not None]
        waiting = [] if held else [c for c in named if mine[c].bucket not in _SETTLED]
        if waiting:
            dependencies.add_missing(connection, session.task_id, waiting)
            session.wait_in(connection, waiting)
    if held:
        return {
            "status": "ready",
            "children": named,
            "held": held,
            "next": "a child is held for its approver: decide without it (recovery_brief)",
        }
    if not waiting:
        return {"status": "ready", "children": named, "next": "they are all done: go on"}
    return {
        "status": "waiting",
        "children": waiting,
        "next": "stop now: this TASK runs again, in a new attempt, once they are done",
    }


def _not_children(parent_id: str, strangers: list[str]) -> str:
    if not strangers:
        return f"{parent_id} has delegated no child to wait for"
    return f"{', '.join(strangers)} is no child of {parent_id}: wait only for TASKs it delegated"


def children(session: Session) -> list[dict[str, Any]]:
    """The children of ``session``'s TASK as its brief lists them (with their REPORTs)."""
    brief = brief_for(session.services.store, session.task_id, session.attempt)
    return [asdict(child) for child in brief.children]
