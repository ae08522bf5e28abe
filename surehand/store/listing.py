"""The console's lists of TASKs: filtered, searched, counted and paged in SQL.

Newest first, paged by keyset on ``(created_at, task_id)`` -- a total order, so a walk from the
first page to the last sees every TASK that matched once, however many there are, with no
OFFSET to skip over. Counts are exact per bucket from the board indexes (``ix_tasks_board``,
``ix_tasks_recipient_board``); a text search counts at most ``cap`` matches per bucket and says
so (an honest lower bound), since it reads every body of the tenant.

The text search is case-insensitive on both databases (SQLite's ``lower`` is replaced by a
Unicode one in ``store/engine.py``) over the TASK id, the submission id, subject and body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, func, literal, or_, select, tuple_

from surehand.model import Bucket, Priority
from surehand.model.listing import Count, Cursor, Page
from surehand.store.schema import UTCDateTime, tasks
from surehand.store.tasks import TASK_COLUMNS, from_row

__all__ = ["Count", "Cursor", "Page", "TaskFilter", "counts", "page"]


@dataclass(frozen=True)
class TaskFilter:
    """Which TASKs of a tenant a list shows (every field optional but the tenant)."""

    tenant: str
    bucket: Bucket | None = None
    recipient: str | None = None
    priority: Priority | None = None
    text: str = ""

    def conditions(self) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = [tasks.c.tenant == self.tenant]
        if self.bucket is not None:
            found.append(tasks.c.bucket == self.bucket.value)
        if self.recipient is not None:
            found.append(tasks.c.recipient == self.recipient)
        if self.priority is not None:
            found.append(tasks.c.priority == self.priority.value)
        if self.text.strip():
            found.append(_matches(self.text.strip().lower()))
        return found


def _matches(needle: str) -> ColumnElement[bool]:
    columns = (tasks.c.task_id, tasks.c.client_submission_id, tasks.c.subject, tasks.c.body)
    return or_(*(func.lower(column).contains(needle, autoescape=True) for column in columns))


def _older_than(cursor: Cursor) -> ColumnElement[bool]:
    """Rows after ``cursor`` in newest-first order (older ones). A row-value comparison, not
    the equivalent OR: both databases read it as a range of the board index, so a page deep in
    the list costs what the first page costs."""
    return _position() < _at(cursor)


def _newer_than(cursor: Cursor) -> ColumnElement[bool]:
    """Rows before ``cursor`` in newest-first order (newer ones)."""
    return _position() > _at(cursor)


def _position() -> ColumnElement[Any]:
    return tuple_(tasks.c.created_at, tasks.c.task_id)


def _at(cursor: Cursor) -> ColumnElement[Any]:
    return tuple_(literal(cursor.created_at, UTCDateTime()), literal(cursor.task_id))


def page(
    connection: Connection,
    wanted: TaskFilter,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    limit: int = 50,
) -> Page:
    """The ``limit`` TASKs that follow ``after`` (older ones), or precede ``before`` (newer
    ones), or the newest ``limit``; newest first."""
    if before is not None:
        return _newer_page(connection, wanted, before, limit)
    query = select(*TASK_COLUMNS).where(*wanted.conditions())  # not the stored document
    if after is not None:
        query = query.where(_older_than(after))
    rows = connection.execute(
        query.order_by(tasks.c.created_at.desc(), tasks.c.task_id.desc()).limit(limit + 1)
    ).all()
    found = [from_row(row) for row in rows[:limit]]
    older = Cursor.at(found[-1]) if len(rows) > limit else None
    newer = Cursor.at(found[0]) if after is not None and found else None
    return Page(found, older, newer)


def _newer_page(connection: Connection, wanted: TaskFilter, before: Cursor, limit: int) -> Page:
    query = select(*TASK_COLUMNS).where(*wanted.conditions(), _newer_than(before))
    rows = connection.execute(
        query.order_by(tasks.c.created_at.asc(), tasks.c.task_id.asc()).limit(limit + 1)
    ).all()
    found = [from_row(row) for row in reversed(rows[:limit])]
    newer = Cursor.at(found[0]) if len(rows) > limit else None
    older = Cursor.at(found[-1]) if found else None
    return Page(found, older, newer)


def counts(connection: Connection, wanted: TaskFilter, *, cap: int = 1000) -> dict[Bucket, Count]:
    """Matching TASKs per bucket (``wanted.bucket`` ignored): exact from the indexes, or, for a
    text search, counted up to ``cap`` per bucket (``exact`` False past it)."""
    every = TaskFilter(wanted.tenant, None, wanted.recipient, wanted.priority, wanted.text)
    if not every.text.strip():
        query = select(tasks.c.bucket, func.count()).where(*every.conditions())
        rows = connection.execute(query.group_by(tasks.c.bucket)).all()
        found = {str(bucket): int(n) for bucket, n in rows}
        return {bucket: Count(found.get(bucket.value, 0)) for bucket in Bucket}
    return {bucket: _capped(connection, every, bucket, cap) for bucket in Bucket}


def _capped(connection: Connection, every: TaskFilter, bucket: Bucket, cap: int) -> Count:
    matching = (
        select(tasks.c.task_id)
        .where(*every.conditions(), tasks.c.bucket == bucket.value)
        .limit(cap + 1)
        .subquery()
    )
    found = int(connection.execute(select(func.count()).select_from(matching)).scalar_one())
    return Count(min(found, cap), exact=found <= cap)
