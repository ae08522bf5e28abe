"""What the session tools answer: the fenced service calls behind ``effect_begin``,
``effect_end`` and ``delegate`` (shared with the Claude Code hooks of
:mod:`surehand.mcp.session_hooks`), each turned into the dict the agent reads, with what to do
next. The MCP plumbing -- grants, budgets, refusals -- stays in :mod:`surehand.mcp.session_tools`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from surehand.digest import operation_fingerprint
from surehand.dispatcher import queries
from surehand.dispatcher.delegation import delegate
from surehand.dispatcher.operations import Declared, declare_operation, settle_operation
from surehand.dispatcher.sessions import Session
from surehand.errors import ValidationFailed
from surehand.model import Operation, OperationState


def size_of(data: Any) -> int:
    """The bytes ``data`` asks to store, as JSON (0 for None)."""
    if data is None:
        return 0
    return len(json.dumps(data, ensure_ascii=False, default=str).encode())


def fence(session: Session, write: str) -> None:
    """Refuse (and record) a call from an attempt that no longer owns its TASK."""
    with session.fenced(write):
        pass


def begin(session: Session, declared: Declared, within: Sequence[int] = ()) -> dict[str, Any]:
    """``effect_begin``'s answer (``begun`` or ``already_done``); ``within``: the declared
    effects a journaled call runs in (:func:`declare_operation`)."""
    operation_id = declare_operation(session, declared, within=within)
    if operation_id is not None:
        return {
            "status": "begun",
            "operation_id": operation_id,
            "next": "do the effect now, then call effect_end with this operation_id",
        }
    recorded = _recorded(session, declared)
    return {
        "status": "already_done",
        "operation_id": recorded.operation_id,
        "attempt": recorded.epoch,
        "outcome": (recorded.outcome or {}).get("value"),
        "receipt": recorded.external_receipt,
        "confirmed_by": (recorded.outcome or {}).get("source"),
        "next": "this effect already happened for this TASK: do NOT do it again",
    }


def _recorded(session: Session, declared: Declared) -> Operation:
    fingerprint = operation_fingerprint(declared.name, declared.args)
    found = queries.latest_operation(session.services, session.task_id, fingerprint)
    assert found is not None  # declare_operation just read it as succeeded
    return found


def end_effect(
    session: Session,
    operation_id: int,
    outcome: str,
    receipt: str | None,
    value: Any,
    error: str | None,
) -> dict[str, Any]:
    """``effect_end``'s answer: the outcome of an operation this session began, recorded."""
    fence(session, "operation_outcome")
    found = queries.operation(session.services, operation_id)
    if found is None or found.attempt_id != session.attempt.attempt_id:
        raise ValidationFailed(
            "operation_id", f"{operation_id} is not an operation this session began"
        )
    if found.state is not OperationState.INTENT:
        return {"status": "already_recorded", **_outcome_of(found)}
    failed = outcome == "failed"
    why = (error or "the agent reported that the effect failed") if failed else None
    settle_operation(session, operation_id, value=value, receipt=receipt, error=why)
    return {"status": "recorded", "operation_id": operation_id, "outcome": outcome}


def _outcome_of(operation: Operation) -> Mapping[str, Any]:
    return {
        "operation_id": operation.operation_id,
        "outcome": operation.state.value,
        "receipt": operation.external_receipt,
    }


def delegated(session: Session, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``delegate``'s answer: the child's creation result, with what to do next."""
    result = delegate(session, arguments).to_dict()
    if result["disposition"] == "conflict":
        result["next"] = (
            "this key names another child already: use a new key for a new child, or repeat "
            "the first request to find that child"
        )
    elif result["disposition"] == "reused":
        result["next"] = "this child exists already (an earlier attempt created it): go on"
    else:
        result["next"] = "the child TASK is created and queued for its role"
    return result
