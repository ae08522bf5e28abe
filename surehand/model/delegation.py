"""How a delegated child TASK is named: its ``client_submission_id`` is the parent TASK and the
key the agent gave (or one derived from its request), never the attempt, so every attempt of
the parent finds the same child (:mod:`surehand.dispatcher.delegation`)."""

from __future__ import annotations

SUBMISSION_PREFIX = "delegate"


def submission_id(parent_id: str, key: str) -> str:
    """The child's ``client_submission_id``: the parent TASK and the key, not the attempt."""
    return f"{SUBMISSION_PREFIX}:{parent_id}:{key}"


def key_of(parent_id: str, child_submission_id: str | None) -> str | None:
    """The key a child was delegated under by ``parent_id`` (None if it was not delegated)."""
    prefix = f"{SUBMISSION_PREFIX}:{parent_id}:"
    if child_submission_id is None or not child_submission_id.startswith(prefix):
        return None
    return child_submission_id[len(prefix) :]
