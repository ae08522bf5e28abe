"""Words every door uses for the same record, so the CLI and the console never disagree."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from surehand.model import Operation


def operation_label(op: Operation) -> str:
    """An operation's state in words (an effect a review found absent did not fail)."""
    outcome = op.outcome or {}
    answered, source = outcome.get("probe"), str(outcome.get("source", ""))
    by = "a review" if source.startswith("review") else f"probe {op.probe or ''}".strip()
    if answered == "present":
        return f"happened (confirmed by {by})"
    if answered == "absent":
        return f"did not happen (confirmed by {by})"
    return {"intent": "begun, outcome unknown", "succeeded": "done", "failed": "raised"}.get(
        op.state.value, op.state.value
    )
