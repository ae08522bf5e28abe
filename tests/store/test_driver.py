"""DriverStatement: Core statements run on the DBAPI cursor must read and write exactly what
Core reads and writes, and fail the way Core fails."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import bindparam, insert, select

from surehand.dispatcher.context import Services
from surehand.errors import DuplicateKey, StoreUnavailable
from surehand.store import Store
from surehand.store.driver import DriverStatement
from surehand.store.schema import attempts, task_events, tasks
from tests.procs import terminate_backends
from tests.session_helpers import committed_task
from tests.skips import not_applicable

_EVENT = insert(task_events).values(
    {c.name: bindparam(c.name) for c in task_events.c if c.name != "id"}
)
_AT = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)


def _event(task_id: str, **changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "task_id": task_id,
        "at": _AT,
        "kind": "report",
        "by": "DEV",
        "principal": None,
        "action": None,
        "from_bucket": None,
        "to_bucket": None,
        "reason": "why",
        "attempt_id": "a-1",
        "epoch": 3,
        "data": {"nested": [1, "two", None], "flag": True},
    }
    row.update(changes)
    return row


def _events(store: Store) -> list[tuple[object, ...]]:
    with store.snapshot() as connection:
        rows = connection.execute(select(task_events).order_by(task_events.c.id)).all()
    return [tuple(row)[1:] for row in rows]


def test_a_driver_insert_stores_what_a_core_insert_stores(services: Services) -> None:
    store, task_id = services.store, committed_task(services)
    with store.transaction() as connection:
        connection.execute(_EVENT, _event(task_id))
        DriverStatement(_EVENT).rowcount(connection, _event(task_id))

    core, driver = _events(store)[-2:]
    assert core == driver
    assert driver[1] == _AT  # timezone-aware UTC in, the same out


def test_a_non_utc_time_is_stored_as_the_same_instant(services: Services) -> None:
    store, task_id = services.store, committed_task(services)
    local = _AT.astimezone(timezone(timedelta(hours=5)))
    with store.transaction() as connection:
        DriverStatement(_EVENT).rowcount(connection, _event(task_id, at=local))

    assert _events(store)[-1][1] == _AT


def test_driver_rows_convert_like_core_rows(services: Services) -> None:
    store, task_id = services.store, committed_task(services)
    query = select(tasks).where(tasks.c.task_id == bindparam("task_id"))
    with store.snapshot() as connection:
        core = connection.execute(query, {"task_id": task_id}).one()
        driver = DriverStatement(query, tasks.c).one_or_none(connection, {"task_id": task_id})

    assert tuple(driver) == tuple(core)
    assert driver.created_at.tzinfo is not None
    assert isinstance(driver.idempotent, bool)
    assert isinstance(driver.references, list)


def test_a_repeated_parameter_is_bound_at_every_place_it_appears(services: Services) -> None:
    store, task_id = services.store, committed_task(services)
    query = select(tasks.c.task_id).where(
        tasks.c.task_id == bindparam("id"), tasks.c.tenant != bindparam("id")
    )
    with store.snapshot() as connection:
        rows = DriverStatement(query, [tasks.c.task_id]).rows(connection, {"id": task_id})

    assert [row.task_id for row in rows] == [task_id]


def test_a_driver_error_is_translated_like_a_core_error(services: Services) -> None:
    store, task_id = services.store, committed_task(services)
    row = {
        "attempt_id": "a-dup",
        "task_id": task_id,
        "number": 1,
        "state": "running",
        "worker": "w",
        "lease_id": "a-dup",
        "agent_returned": False,
        "started_at": _AT,
    }
    statement = DriverStatement(insert(attempts).values({k: bindparam(k) for k in row}))
    with store.transaction() as connection:
        statement.rowcount(connection, row)

    with pytest.raises(DuplicateKey), store.transaction() as connection:
        statement.rowcount(connection, row)


def test_a_connection_the_database_dropped_is_discarded_with_the_pool(
    services: Services,
) -> None:
    if services.store.dialect != "postgresql":
        not_applicable("an in-process SQLite connection cannot be dropped by the server")
    store = services.store
    query = DriverStatement(select(tasks.c.task_id).limit(1), [tasks.c.task_id])
    with store.single_read() as connection:
        query.rows(connection, {})  # at least one pooled connection exists
    terminate_backends(store.url)

    try:
        with pytest.raises(StoreUnavailable), store.single_read() as connection:
            query.rows(connection, {})

        with store.single_read() as connection:  # the next caller gets a fresh connection
            assert query.rows(connection, {}) == []
    finally:
        store.dispose()  # the other engines' pooled connections were dropped too
