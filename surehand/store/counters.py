"""Atomic per-day counters for TASK and REPORT numbers (never from scanning, never reused)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam
from sqlalchemy.dialects import postgresql, sqlite

from surehand.store.driver import DriverStatement
from surehand.store.schema import counters


def _upsert(insert: Any) -> Any:
    # Built once, executed with parameters: the compiled statement is reused from the cache.
    return (
        insert(counters)
        .values(kind=bindparam("kind"), day=bindparam("day"), last=1)
        .on_conflict_do_update(
            index_elements=[counters.c.kind, counters.c.day],
            set_={"last": counters.c.last + 1},
        )
        .returning(counters.c.last)
    )


_UPSERT = {
    name: DriverStatement(_upsert(insert), [counters.c.last])
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def next_number(connection: Connection, kind: str, day: str) -> int:
    """Allocate the next number for (kind, day) inside the caller's transaction.

    One upsert statement. Its row lock serialises allocators until the transaction ends, so a
    rolled-back allocation releases its number and a committed one is never handed out again.
    """
    row = _UPSERT[connection.dialect.name].one_or_none(connection, {"kind": kind, "day": day})
    assert row is not None  # an upsert always returns its row
    return int(row.last)
