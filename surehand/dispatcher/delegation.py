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

from collections.abc import Mapping
from typing import Any

from surehand.crashpoints import CrashPoint, crash_point
from surehand.digest import request_digest
from surehand.dispatcher.sessions import Session
from surehand.dispatcher.submissions import write_task
from surehand.errors import ValidationFailed
from surehand.model import Task, WriteTaskResult
from surehand.model.delegation import submission_id
from surehand.requests import DelegateRequest, parse, parse_task_request
from surehand.store import tasks


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
