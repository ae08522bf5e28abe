"""Writing a new TASK with its committed receipt, outbox row and creation event, atomically.

The TASK's outbox row (:mod:`surehand.store.outbox`) goes in with them: its message is
published after the commit, off the caller's path. On Postgres the four inserts are one
statement (data-modifying CTEs, executed completely or not at all), so a create needs no
BEGIN/COMMIT round trips; run it on an autocommit connection (``Store.one_write``). On SQLite,
whose statements run in-process, they are four inserts in the caller's transaction. Both run
on the driver's cursor (``DriverStatement``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    String,
    Table,
    bindparam,
    cast,
    column,
    exists,
    insert,
    literal,
    null,
    select,
    union_all,
)
from sqlalchemy.dialects import postgresql

from surehand.store import counters as counter_rows
from surehand.store import dependencies
from surehand.store.driver import DriverStatement, common_binds, own_params
from surehand.store.schema import counters, outbox, receipts, task_events, tasks

# Columns that the receipt and the TASK (and, for two of them, the event) take from one common
# parameter: with them bound once, the statement stays within psycopg's cache of converted
# queries instead of being re-parsed on every create.
_COMMON = {
    "task_id": "c_task_id",
    "tenant": "c_tenant",
    "client_submission_id": "c_submission_id",
    "request_digest": "c_request_digest",
    "digest_schema_version": "c_schema_version",
    "document_digest": "c_document_digest",
    "created_at": "c_now",
    "updated_at": "c_now",
}
_EVENT_COMMON = {"task_id": "c_task_id", "at": "c_now"}
_OUTBOX_COMMON = {"task_id": "c_task_id", "created_at": "c_now"}


def _columns(table: Table) -> list[str]:
    return [c.name for c in table.c if c.autoincrement is not True]


def _values(table: Table, prefix: str, common: Mapping[str, str]) -> dict[str, Any]:
    shared = common_binds(common, {c.name: c.type for c in table.c if c.name in common})
    return {
        name: shared[name]
        if name in shared
        else bindparam(f"{prefix}{name}", type_=table.c[name].type)
        for name in _columns(table)
    }


def _postgres_statement() -> DriverStatement:
    receipt = insert(receipts).values(_values(receipts, "r_", _COMMON)).cte("new_receipt")
    task = insert(tasks).values(_values(tasks, "t_", _COMMON)).cte("new_task")
    queued = insert(outbox).values(_values(outbox, "o_", _OUTBOX_COMMON)).cte("new_outbox")
    event = insert(task_events).values(_values(task_events, "e_", _EVENT_COMMON))
    return DriverStatement(event.add_cte(receipt, task, queued))


def _insert(table: Table) -> DriverStatement:
    return DriverStatement(
        insert(table).values({name: bindparam(name) for name in _columns(table)})
    )


_POSTGRES = _postgres_statement()
_RECEIPT, _TASK, _EVENT = _insert(receipts), _insert(tasks), _insert(task_events)
_OUTBOX = _insert(outbox)


def _common_params(task: Mapping[str, Any]) -> dict[str, Any]:
    return {parameter: task[column] for column, parameter in _COMMON.items()}


def postgres_parameters(
    receipt: Mapping[str, Any], task: Mapping[str, Any], event: Mapping[str, Any]
) -> dict[str, Any]:
    """The parameters of the one-statement create (ValueError if the rows disagree on a
    column they share: the TASK's values are the common ones)."""
    params = _common_params(task)
    params.update(own_params("r_", receipt, _COMMON, params))
    params.update(own_params("t_", task, _COMMON, params))
    params.update(own_params("e_", event, _EVENT_COMMON, params))
    return params


def insert_created(
    connection: Connection,
    *,
    receipt: Mapping[str, Any] | None,
    task: Mapping[str, Any],
    event: Mapping[str, Any],
) -> None:
    """Insert the receipt (None on the legacy path), the TASK, its outbox row, its creation
    event and its dependencies' rows. A TASK with dependencies takes several statements: run
    it in a transaction (``Store.transaction``), not on an autocommit connection.

    Raises DuplicateKey (through the store's transaction or one-write context) if the
    submission or the task id exists already; then nothing was written.
    """
    depends_on = list(task["depends_on"])
    if connection.dialect.name == "postgresql" and receipt is not None and not depends_on:
        _POSTGRES.rowcount(connection, postgres_parameters(receipt, task, event))
        return
    # The receipt goes first: a concurrent caller with the same id stops there.
    if receipt is not None:
        _RECEIPT.rowcount(connection, receipt)
    _TASK.rowcount(connection, task)
    _OUTBOX.rowcount(connection, {"task_id": task["task_id"], "created_at": task["created_at"]})
    _EVENT.rowcount(connection, event)
    dependencies.insert_rows(connection, task["task_id"], depends_on)


def _receipt_or_number_statement() -> DriverStatement:
    """Postgres: the receipt of (tenant, id) if there is one; otherwise the next number of
    (kind, day), allocated by the same statement. Exactly one row either way."""
    existing = (
        select(receipts)
        .where(
            receipts.c.tenant == bindparam("tenant"),
            receipts.c.client_submission_id == bindparam("sid"),
        )
        .cte("existing")
    )
    # INSERT ... SELECT ... WHERE NOT EXISTS: with a receipt there, nothing is inserted, so the
    # counter row is neither updated nor locked (a retry never queues behind creators).
    wanted = select(
        bindparam("kind", type_=String()),
        bindparam("day", type_=String()),
        literal(1),
        bindparam("secret", type_=String()),
    ).where(~exists(select(existing.c.tenant)))
    allocated = (
        postgresql.insert(counters)
        .from_select(["kind", "day", "last", "secret"], wanted)
        .on_conflict_do_update(
            index_elements=[counters.c.kind, counters.c.day],
            set_={"last": counters.c.last + 1},  # the key stays (counters.py)
        )
        .returning(counters.c.last, counters.c.secret)
        .cte("allocated")
    )
    nothing = (cast(null(), Integer()).label("number"), cast(null(), String()).label("secret"))
    found = select(*existing.c, *nothing)
    fresh = select(
        *(cast(null(), c.type).label(c.name) for c in receipts.c),
        allocated.c.last,
        allocated.c.secret,
    )
    returns = [*receipts.c, column("number", Integer()), column("secret", String())]
    return DriverStatement(union_all(found, fresh), returns)


_RECEIPT_OR_NUMBER = _receipt_or_number_statement()


def receipt_or_number(
    connection: Connection, *, tenant: str, submission_id: str, kind: str, day: str
) -> tuple[Any, int | None]:
    """Postgres only: ``(receipt row, None)`` when the submission has a receipt, else
    ``(None, number)`` with the next number of (kind, day) allocated, in one statement, and
    presented as ``counters.next_number`` presents it. Run it where the allocation may commit
    on its own (see ``Store.allocate_ahead``)."""
    params = {
        "tenant": tenant,
        "sid": submission_id,
        "kind": kind,
        "day": day,
        "secret": counter_rows.new_secret(kind),
    }
    row = _RECEIPT_OR_NUMBER.one_or_none(connection, params)
    assert row is not None  # either the receipt or the upsert's row
    if row.number is not None:
        return None, counter_rows.presented(int(row.number), row.secret)
    return row, None
