"""A TASK's tree of children (its ``parent`` references, in its tenant), for the doors:
``surehand show`` and the console's TASK page list it with buckets and holds, and say of each
held descendant "child TASK-… held: <reason>"."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from surehand.dispatcher.context import Services
from surehand.model import Task
from surehand.store import tasks

MAX_NODES = 500  # a tree is bounded by delegation's depth and children limits; this bounds a page


@dataclass(frozen=True)
class Node:
    """One descendant: the TASK and how deep (1: a child, 2: a grandchild, ...)."""

    task: Task
    depth: int

    @property
    def held_line(self) -> str | None:
        """``child TASK-… held: <reason>`` when it is held, else None."""
        if self.task.hold is None:
            return None
        return f"child {self.task.task_id} held: {self.task.hold.reason}"

    def to_dict(self) -> dict[str, object]:
        hold = self.task.hold
        return {
            "task_id": self.task.task_id,
            "parent": self.task.fields.parent,
            "depth": self.depth,
            "recipient": self.task.fields.recipient,
            "subject": self.task.fields.subject,
            "bucket": self.task.bucket.value,
            "hold": {"case_id": hold.case_id, "reason": hold.reason} if hold else None,
            "cancelled": self.task.cancel is not None,
        }


def tree(services: Services, task_id: str) -> list[Node]:
    """``task_id``'s descendants, depth first, each child after its parent (oldest first)."""
    with services.store.snapshot() as connection:
        found: list[Node] = []
        _walk(connection, task_id, 1, found)
    return found


def _walk(connection: Connection, parent_id: str, depth: int, found: list[Node]) -> None:
    for child in tasks.children(connection, parent_id, limit=MAX_NODES):
        if len(found) >= MAX_NODES:
            return
        found.append(Node(child, depth))
        _walk(connection, child.task_id, depth + 1, found)


def held_lines(nodes: list[Node]) -> list[str]:
    """What the parent says of its held descendants."""
    return [line for node in nodes if (line := node.held_line) is not None]
