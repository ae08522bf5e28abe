"""Writing a new TASK with its committed receipt and creation event, atomically.

On Postgres the three inserts are one statement (data-modifying CTEs, executed completely or
not at all), so a create needs no BEGIN/COMMIT round trips; run it on an autocommit
connection (``Store.one_write``). On SQLite, whose statements run in-process, they are three
inserts in the caller's transaction. Both run on the driver's cursor (``DriverStatement``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert

from surehand.store.driver import DriverStatement, common_binds, own_params
from surehand.store.schema import receipts, task_events, tasks

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
    event = insert(task_events).values(_values(task_events, "e_", _EVENT_COMMON))
    return DriverStatement(event.add_cte(receipt, task))


def _insert(table: Table) -> DriverStatement:
    return DriverStatement(
        insert(table).values({name: bindparam(name) for name in _columns(table)})
    )


_POSTGRES = _postgres_statement()
_RECEIPT, _TASK, _EVENT = _insert(receipts), _insert(tasks), _insert(task_events)


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
    """Insert the receipt (None on the legacy path), the TASK and its creation event.

    Raises DuplicateKey (through the store's transaction or one-write context) if the
    submission or the task id exists already; then nothing was written.
    """
    if connection.dialect.name == "postgresql" and receipt is not None:
        _POSTGRES.rowcount(connection, postgres_parameters(receipt, task, event))
        return
    # The receipt goes first: a concurrent caller with the same id stops there.
    if receipt is not None:
        _RECEIPT.rowcount(connection, receipt)
    _TASK.rowcount(connection, task)
    _EVENT.rowcount(connection, event)
