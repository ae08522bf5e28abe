"""Atomic per-day counters for TASK and REPORT numbers (never from scanning, never reused)."""

from __future__ import annotations

from sqlalchemy import Connection, update
from sqlalchemy.dialects import postgresql, sqlite

from surehand.store.schema import counters


def next_number(connection: Connection, kind: str, day: str) -> int:
    """Allocate the next number for (kind, day) inside the caller's transaction.

    The row lock taken by the UPDATE serialises allocators until the transaction ends, so a
    rolled-back allocation releases its number and a committed one is never handed out again.
    """
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    connection.execute(insert(counters).values(kind=kind, day=day, last=0).on_conflict_do_nothing())
    bumped = connection.execute(
        update(counters)
        .where(counters.c.kind == kind, counters.c.day == day)
        .values(last=counters.c.last + 1)
        .returning(counters.c.last)
    ).scalar_one()
    return int(bumped)
