"""The reconciler finishes cascades: a cancelled TASK whose children are still open.

A cancel cascades to the TASK's open children in its own transaction
(:func:`surehand.dispatcher.cancel.cascade`), so a process that dies halfway commits nothing
and the caller asks again. What that transaction cannot see is a child created after it: a
running parent's session may ``delegate`` between the cancel's commit and the moment its
worker stops it. Each reconciler pass looks for cancelled TASKs with open, uncancelled children
and cancels them the same way, recorded with the parent's canceller and principal.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from surehand.dispatcher.cancel import cascade
from surehand.dispatcher.context import Services
from surehand.model import Bucket, EventKind
from surehand.store import events, tasks
from surehand.store.schema import tasks as task_rows

PARENTS_PER_PASS = 100  # cascades finished per pass; the rest in the next passes

_parent = task_rows.alias("parent")
_OPEN = (Bucket.INBOX.value, Bucket.ACTIVE.value)


def unfinished(connection: Connection, limit: int = PARENTS_PER_PASS) -> list[str]:
    """Cancelled TASKs with a child in inbox or active whose cancel is not recorded."""
    query = (
        select(_parent.c.task_id)
        .join(
            task_rows,
            (task_rows.c.parent == _parent.c.task_id) & (task_rows.c.tenant == _parent.c.tenant),
        )
        .where(
            task_rows.c.bucket.in_(_OPEN),
            task_rows.c.cancel_requested_at.is_(None),
            _parent.c.cancel_requested_at.isnot(None),
        )
        .distinct()
        .order_by(_parent.c.task_id)
        .limit(limit)
    )
    return list(connection.execute(query).scalars())


def finish(services: Services) -> int:
    """Finish the cascades :func:`unfinished` finds, each in its own transaction; the number
    of children cancelled."""
    with services.store.snapshot() as connection:
        parents = unfinished(connection)
    done = 0
    for parent_id in parents:
        with services.store.transaction() as connection:
            parent = tasks.get_for_update(connection, parent_id)
            if parent is None or parent.cancel is None:
                continue
            done += len(
                cascade(
                    connection, services, parent, parent.cancel.by, _acting(connection, parent_id)
                )
            )
    return done


def _acting(connection: Connection, task_id: str) -> dict[str, object]:
    """Who cancelled ``task_id`` (its cancel_requested event's principal), for the children."""
    asked = events.history(connection, task_id, EventKind.CANCEL_REQUESTED)
    found = asked[0].data if asked else {}
    kept = {k: found[k] for k in ("principal", "principal_role", "on_behalf_of") if k in found}
    return {**kept, "finished_by": "reconciler"}
