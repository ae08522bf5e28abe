"""Atomic per-day counters for TASK and REPORT numbers (never from scanning, never reused).

A TASK number is shown permuted (:mod:`surehand.store.numbering`): the day's counter row holds
the key, set by the allocation that creates the row and never changed, so one statement both
allocates the number and returns what is needed to present it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam
from sqlalchemy.dialects import postgresql, sqlite

from surehand.store import numbering
from surehand.store.driver import DriverStatement
from surehand.store.schema import counters

# Kinds whose numbers are shown permuted: both counters are shared by every tenant, so numbers
# shown as counted would tell each tenant the deployment's volume.
PERMUTED = frozenset({"TASK", "REPORT"})


def _upsert(insert: Any) -> Any:
    # Built once, executed with parameters: the compiled statement is reused from the cache.
    return (
        insert(counters)
        .values(kind=bindparam("kind"), day=bindparam("day"), last=1, secret=bindparam("secret"))
        .on_conflict_do_update(
            index_elements=[counters.c.kind, counters.c.day],
            set_={"last": counters.c.last + 1},  # the key stays: the day's ids depend on it
        )
        .returning(counters.c.last, counters.c.secret)
    )


_UPSERT = {
    name: DriverStatement(_upsert(insert), [counters.c.last, counters.c.secret])
    for name, insert in (("postgresql", postgresql.insert), ("sqlite", sqlite.insert))
}


def new_secret(kind: str) -> str | None:
    """The key a new counter row of ``kind`` gets (None: its numbers are shown as counted)."""
    return numbering.new_secret() if kind in PERMUTED else None


def presented(last: int, secret: str | None) -> int:
    """The number to show for the counter value ``last`` of a row keyed by ``secret``."""
    return numbering.present(last, secret)


def next_number(connection: Connection, kind: str, day: str) -> int:
    """Allocate the next number for (kind, day) inside the caller's transaction.

    One upsert statement. Its row lock serialises allocators until the transaction ends, so a
    rolled-back allocation releases its number and a committed one is never handed out again.
    The number returned is the one to show in the id (permuted).
    """
    return allocate(connection, kind, day)[1]


def allocate(connection: Connection, kind: str, day: str) -> tuple[int, int]:
    """:func:`next_number`, as ``(counter value, number shown)``: the counter value orders
    what was numbered within the day and is never shown."""
    params = {"kind": kind, "day": day, "secret": new_secret(kind)}
    row = _UPSERT[connection.dialect.name].one_or_none(connection, params)
    assert row is not None  # an upsert always returns its row
    return int(row.last), presented(int(row.last), row.secret)
