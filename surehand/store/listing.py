"""The console's lists of TASKs: filtered, searched, counted and paged in SQL.

Newest first, paged by keyset on ``(created_at, task_id)`` -- a total order, so a walk from the
first page to the last sees every TASK that matched once, however many there are, with no
OFFSET to skip over. Counts are exact per bucket from the board indexes (``ix_tasks_board``,
``ix_tasks_recipient_board``).

A text search reads bodies, so it reads a bounded number of them: at most ``scan`` TASKs (the
newest that pass the other filters, from the page's cursor on) per query. A page whose window
ends before it is full says so (``Page.scanned``) and its older-cursor continues after the last
TASK read, so walking the pages still finds every match; a search's count per bucket counts the
matches among its newest ``scan`` TASKs and is a lower bound (``exact`` False) past them.

The text search is case-insensitive on both databases (SQLite's ``lower`` is replaced by a
Unicode one in ``store/engine.py``) over the TASK id, the submission id, subject and body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    Subquery,
    case,
    func,
    literal,
    or_,
    select,
    tuple_,
)

from surehand.model import Bucket, Priority
from surehand.model.listing import Count, Cursor, Page
from surehand.store.column_types import UTCDateTime
from surehand.store.schema import tasks
from surehand.store.task_columns import TASK_COLUMNS, from_row

__all__ = ["SCAN", "Count", "Cursor", "Page", "TaskFilter", "counts", "page"]

SCAN = 5000  # TASKs a text search reads per query (SUREHAND_SEARCH_SCAN_ROWS)


@dataclass(frozen=True)
class TaskFilter:
    """Which TASKs of a tenant a list shows (every field optional but the tenant)."""

    tenant: str
    bucket: Bucket | None = None
    recipient: str | None = None
    priority: Priority | None = None
    text: str = ""

    @property
    def needle(self) -> str:
        """The text searched for (empty: no text search)."""
        return self.text.strip().lower()

    def conditions(self, *, text: bool = True) -> list[ColumnElement[bool]]:
        """The WHERE clause (``text`` False: every filter but the text search)."""
        found: list[ColumnElement[bool]] = [tasks.c.tenant == self.tenant]
        if self.bucket is not None:
            found.append(tasks.c.bucket == self.bucket.value)
        if self.recipient is not None:
            found.append(tasks.c.recipient == self.recipient)
        if self.priority is not None:
            found.append(tasks.c.priority == self.priority.value)
        if text and self.needle:
            found.append(_matches(self.needle))
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
    scan: int = SCAN,
) -> Page:
    """The ``limit`` TASKs that follow ``after`` (older ones), or precede ``before`` (newer
    ones), or the newest ``limit``; newest first. A text search reads at most ``scan`` TASKs."""
    newer_side = before is not None
    cursor = before if newer_side else after
    window = _window(wanted, cursor, newer_side, scan) if wanted.needle else None
    if window is not None:  # the match is tried on the window's rows only
        query = select(*TASK_COLUMNS).join(window, tasks.c.task_id == window.c.task_id)
        query = query.where(_matches(wanted.needle))
    else:
        query = select(*TASK_COLUMNS).where(*wanted.conditions(), *_beyond(cursor, newer_side))
    rows = connection.execute(query.order_by(*_order(newer_side)).limit(limit + 1)).all()
    found = [from_row(row) for row in rows[:limit]]
    more = len(rows) > limit
    edge = None if more or window is None else _window_end(connection, window, newer_side, scan)
    scanned = None if edge is None else scan
    if newer_side:
        found.reverse()
        newer = Cursor.at(found[0]) if more else edge
        return Page(found, Cursor.at(found[-1]) if found else None, newer, scanned)
    older = Cursor.at(found[-1]) if more else edge
    newer = Cursor.at(found[0]) if after is not None and found else None
    return Page(found, older, newer, scanned)


def _beyond(cursor: Cursor | None, newer_side: bool) -> list[ColumnElement[bool]]:
    if cursor is None:
        return []
    return [_newer_than(cursor) if newer_side else _older_than(cursor)]


def _order(ascending: bool) -> tuple[ColumnElement[Any], ...]:
    if ascending:
        return (tasks.c.created_at.asc(), tasks.c.task_id.asc())
    return (tasks.c.created_at.desc(), tasks.c.task_id.desc())


def _window(wanted: TaskFilter, cursor: Cursor | None, newer_side: bool, scan: int) -> Subquery:
    """The keys of the ``scan`` TASKs next to ``cursor`` (older ones, or newer ones) that pass
    every filter but the text: what one text-search query reads."""
    keys = select(tasks.c.created_at, tasks.c.task_id).where(
        *wanted.conditions(text=False), *_beyond(cursor, newer_side)
    )
    return keys.order_by(*_order(newer_side)).limit(scan).subquery()


def _window_end(
    connection: Connection, window: Subquery, newer_side: bool, scan: int
) -> Cursor | None:
    """The last TASK a full window read (None: the window held fewer, so nothing is left)."""
    ordered = (window.c.created_at.asc(), window.c.task_id.asc())
    if not newer_side:
        ordered = (window.c.created_at.desc(), window.c.task_id.desc())
    last = connection.execute(
        select(window.c.created_at, window.c.task_id).order_by(*ordered).offset(scan - 1).limit(1)
    ).one_or_none()
    return None if last is None else Cursor(last.created_at, last.task_id)


def counts(connection: Connection, wanted: TaskFilter, *, scan: int = SCAN) -> dict[Bucket, Count]:
    """Matching TASKs per bucket (``wanted.bucket`` ignored): exact from the indexes, or, for a
    text search, the matches among each bucket's newest ``scan`` TASKs (``exact`` False when the
    bucket holds more)."""
    every = TaskFilter(wanted.tenant, None, wanted.recipient, wanted.priority, wanted.text)
    if not every.needle:
        query = select(tasks.c.bucket, func.count()).where(*every.conditions())
        rows = connection.execute(query.group_by(tasks.c.bucket)).all()
        found = {str(bucket): int(n) for bucket, n in rows}
        return {bucket: Count(found.get(bucket.value, 0)) for bucket in Bucket}
    return {bucket: _scanned(connection, every, bucket, scan) for bucket in Bucket}


def _scanned(connection: Connection, every: TaskFilter, bucket: Bucket, scan: int) -> Count:
    window = _newest(every, bucket, scan).subquery()
    hits = func.coalesce(func.sum(case((_matches(every.needle), 1), else_=0)), 0)
    query = select(func.count(), hits).select_from(
        window.join(tasks, tasks.c.task_id == window.c.task_id)
    )
    read, matched = connection.execute(query).one()
    return Count(int(matched), exact=int(read) < scan)


def _newest(every: TaskFilter, bucket: Bucket, scan: int) -> Select[Any]:
    """The keys of ``bucket``'s newest ``scan`` TASKs passing every filter but the text."""
    return (
        select(tasks.c.task_id)
        .where(*every.conditions(text=False), tasks.c.bucket == bucket.value)
        .order_by(*_order(ascending=False))
        .limit(scan)
    )
