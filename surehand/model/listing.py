"""Records of the console's lists: a page of TASKs, its cursors, and a count."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from surehand.model.records import Task

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Cursor:
    """A position in the newest-first order: the TASK ``(created_at, task_id)`` it is at."""

    created_at: datetime
    task_id: str

    @classmethod
    def at(cls, task: Task) -> Cursor:
        return cls(task.created_at, task.task_id)

    def encode(self) -> str:
        """``<microseconds since 1970>.<task id>``: URL-safe, exact."""
        micros = (self.created_at - EPOCH) // timedelta(microseconds=1)
        return f"{micros}.{self.task_id}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor ``encode`` wrote (ValueError for anything else)."""
        micros, _, task_id = text.partition(".")
        if not micros.isdigit() or len(micros) > 18 or not task_id.startswith("TASK-"):
            raise ValueError("not a page cursor")
        return cls(EPOCH + timedelta(microseconds=int(micros)), task_id)


@dataclass(frozen=True)
class Page:
    """One page of a list and the cursors of its neighbours (None: there is none).

    ``scanned``: a text search stopped after reading this many TASKs before the page was full;
    the cursor past them goes on where it stopped."""

    tasks: list[Task]
    older: Cursor | None
    newer: Cursor | None
    scanned: int | None = None


@dataclass(frozen=True)
class Count:
    """How many TASKs match: exact, or (``exact`` False) at least ``value``."""

    value: int
    exact: bool = True
