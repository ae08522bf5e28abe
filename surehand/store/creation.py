"""Writing a new TASK with its committed receipt and creation event, atomically.

On Postgres the three inserts are one statement (data-modifying CTEs, executed completely or
not at all), so a create needs no BEGIN/COMMIT round trips; run it on an autocommit
connection (``Store.one_write``). On SQLite, whose statements run in-process, they are three
inserts in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Insert, Table, bindparam, insert

from surehand.store.schema import receipts, task_events, tasks


def _values(table: Table, prefix: str) -> dict[str, Any]:
    return {c.name: bindparam(f"{prefix}{c.name}") for c in table.c if c.autoincrement is not True}


def _postgres_statement() -> Insert:
    receipt = insert(receipts).values(_values(receipts, "r_")).cte("new_receipt")
    task = insert(tasks).values(_values(tasks, "t_")).cte("new_task")
    return insert(task_events).values(_values(task_events, "e_")).add_cte(receipt, task)


_POSTGRES = _postgres_statement()
# Built once: executed with parameters, their compiled forms come from the cache.
_RECEIPT, _TASK, _EVENT = insert(receipts), insert(tasks), insert(task_events)


def insert_created(
    connection: Connection,
    *,
    receipt: Mapping[str, Any] | None,
    task: Mapping[str, Any],
    event: Mapping[str, Any],
) -> None:
    """Insert the receipt (None on the legacy path), the TASK and its creation event.

    Raises DuplicateKey (through the store's transaction or one-write context) if the
    submission or the task id exists already; then nothing was written.
    """
    if connection.dialect.name == "postgresql" and receipt is not None:
        params = {f"r_{k}": v for k, v in receipt.items()}
        params.update({f"t_{k}": v for k, v in task.items()})
        params.update({f"e_{k}": v for k, v in event.items()})
        connection.execute(_POSTGRES, params)
        return
    # The receipt goes first: a concurrent caller with the same id stops there.
    if receipt is not None:
        connection.execute(_RECEIPT, dict(receipt))
    connection.execute(_TASK, dict(task))
    connection.execute(_EVENT, dict(event))
