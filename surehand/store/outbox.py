"""The transactional *outbox*: TASKs whose ``run_session`` message is still to be published.

A row is inserted in the transaction that creates its TASK (:mod:`surehand.store.creation`),
so a committed TASK always has either its row or its published flag. Publishers *take* rows by
deleting them (``DELETE ... RETURNING``): on Postgres the candidates are locked with
``SKIP LOCKED``, so concurrent publishers take disjoint batches and none waits on another; on
SQLite writers are serialised (``BEGIN IMMEDIATE``). Either way each row is taken by exactly
one publisher. A publisher that dies after taking rows leaves their TASKs unpublished in
``inbox``, where the dispatcher sweep finds them. (Taking a row is not a *claim*: only a
session claims, and it claims a TASK, :mod:`surehand.dispatcher.claims`.)
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, func, insert, select

from surehand.store.schema import outbox


def add(connection: Connection, task_id: str, now: datetime) -> None:
    """Queue ``task_id``'s message, in the caller's (creating) transaction."""
    connection.execute(insert(outbox).values(task_id=task_id, created_at=now))


def take(connection: Connection, limit: int) -> list[str]:
    """Delete up to ``limit`` of the oldest rows and return their TASK ids (oldest first).

    Rows another publisher has taken and not yet committed are skipped (Postgres), never
    waited for; once this transaction commits, no other publisher can take them."""
    candidates = select(outbox.c.id).order_by(outbox.c.id).limit(limit)
    if connection.dialect.name == "postgresql":
        candidates = candidates.with_for_update(skip_locked=True)
    statement = (
        delete(outbox).where(outbox.c.id.in_(candidates)).returning(outbox.c.id, outbox.c.task_id)
    )
    rows = connection.execute(statement).all()
    return [row.task_id for row in sorted(rows, key=lambda row: row.id)]


def pending(connection: Connection) -> int:
    """How many rows wait to be taken."""
    return int(connection.execute(select(func.count()).select_from(outbox)).scalar_one())
