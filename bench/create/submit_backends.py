"""What ``submit.py`` measures side by side: the stores it opens (SQLite, Postgres), the bare
table and the raw-driver insert it compares write_task with, and one operation of each variant
(bare, bare/driver, create, reuse, the DBOS peers), run by ``throughput`` from many clients."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Json
from sqlalchemy import JSON, Column, MetaData, create_engine, insert, text
from sqlalchemy import Table as SqlTable
from sqlalchemy.engine import make_url

from bench.common.databases import libpq
from surehand.clock import SystemClock
from surehand.config import Settings
from surehand.digest import request_digest, sha256_hex
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.fcop.render import render_task
from surehand.model import DIGEST_SCHEMA_VERSION, Bucket
from surehand.requests import parse_task_request
from surehand.store import Store
from surehand.store.schema import metadata, tasks

VARIANTS = ("bare", "create", "reuse")
POSTGRES_VARIANTS = ("bare/driver",)
DBOS_VARIANTS = ("dbos start", "dbos replay", "dbos enqueue")
CREATE_TARGET = 0.5  # create >= 0.5x bare
REUSE_TARGET = 1.0  # reuse >= 1x bare
# (numerator, denominator, target or None): every ratio taken within a round when both ran.
RATIOS: tuple[tuple[str, str, float | None], ...] = (
    ("create", "bare", CREATE_TARGET),
    ("reuse", "bare", REUSE_TARGET),
    ("create", "bare/driver", 0.6),  # issue 13, 1 client on Postgres
    ("reuse", "bare/driver", None),
    ("create", "dbos start", 5.0),  # issue 13
    ("create", "dbos enqueue", None),
    ("reuse", "dbos replay", None),
    ("bare", "bare/driver", None),
)
CONVERGE_CALLERS = 64
Rates = dict[tuple[str, int, str], list[float]]
CLIENTS = (1, 8)
BENCH_DATABASE = "surehand_bench"
TENANT = "bench"
REQUEST: dict[str, Any] = {
    "sender": "PM",
    "recipient": "DEV",
    "subject": "Fix the login redirect after a password reset",
    "body": "Users who reset their password land on a blank page.\n" * 8,
    "priority": "high",
    "references": ["spec:auth", "incident:4411"],
    "risk_level": "medium",
}


@dataclass
class Backend:
    name: str
    store: Store
    services: Services
    bare: SqlTable
    bare_row: dict[str, Any]
    reuse_ids: list[str]
    variants: tuple[str, ...] = VARIANTS
    driver: queue.Queue[psycopg.Connection[Any]] | None = None
    driver_sql: str = ""
    dbos_replay_ids: list[str] | None = None


def postgres_url(admin_url: str) -> str:
    """Create the bench database if needed (as tests/conftest.py does per worker)."""
    parsed = make_url(admin_url)
    admin = create_engine(parsed, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        exists = connection.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": BENCH_DATABASE}
        ).first()
        if not exists:
            connection.execute(text(f'CREATE DATABASE "{BENCH_DATABASE}"'))
    admin.dispose()
    return parsed.set(database=BENCH_DATABASE).render_as_string(hide_password=False)


BARE_TABLE = "bench_bare_tasks"


def bare_columns() -> list[Column[Any]]:
    """The columns (and primary key) of ``tasks``, for a scratch table."""
    return [
        Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
        for c in tasks.columns
    ]


def bare_table(store: Store) -> SqlTable:
    """A scratch table with the columns (and primary key) of ``tasks``, created empty."""
    table = SqlTable(BARE_TABLE, MetaData(), *bare_columns())
    table.drop(store.engine, checkfirst=True)
    table.create(store.engine)
    return table


def empty(store: Store) -> None:
    with store.engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


def row_like_write_task() -> dict[str, Any]:
    """The column values write_task stores for REQUEST (task_id filled in per insert)."""
    fields = parse_task_request(REQUEST).to_fields()
    now = datetime.now(UTC)
    document = render_task("TASK-20260101-001", fields, created_at=now, submission_id="sub-x")
    return {
        "tenant": TENANT,
        **fields.semantic_dict(),
        "bucket": Bucket.INBOX.value,
        "revision": 1,
        "epoch": 0,
        "rework_round": 0,
        "client_submission_id": "bench-" + uuid.uuid4().hex,
        "request_digest": request_digest(fields),
        "digest_schema_version": DIGEST_SCHEMA_VERSION,
        "idempotent": True,
        "document": document,
        "document_digest": sha256_hex(document),
        "published": False,
        "created_at": now,
        "updated_at": now,
    }


def open_driver(backend: Backend, connections: int) -> None:
    """Raw psycopg connections (not autocommit: INSERT, then COMMIT) for ``bare/driver``."""
    backend.driver = queue.Queue()
    for _ in range(connections):
        backend.driver.put(psycopg.connect(libpq(backend.store.engine.url)))
    backend.driver_sql = driver_insert_sql(list(backend.bare.columns))
    backend.variants += POSTGRES_VARIANTS


def driver_insert_sql(columns: list[Column[Any]]) -> str:
    """The bare INSERT of one row into the scratch table, in psycopg's placeholders."""
    names = ", ".join('"' + c.name + '"' for c in columns)
    return f"INSERT INTO {BARE_TABLE} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"


def driver_values(columns: list[Column[Any]], row: dict[str, Any]) -> list[Any]:
    """``row`` in column order, JSON columns wrapped for the driver."""
    return [Json(row.get(c.name)) if isinstance(c.type, JSON) else row.get(c.name) for c in columns]


def close_driver(backend: Backend) -> None:
    while backend.driver is not None and not backend.driver.empty():
        backend.driver.get().close()


def open_backend(name: str, url: str, reuse_pool: int) -> Backend:
    store = Store(url, auto_upgrade=True)
    store.ensure_schema()
    empty(store)
    services = Services(
        store=store,
        settings=Settings(),
        clock=SystemClock(),
    )
    backend = Backend(name, store, services, bare_table(store), row_like_write_task(), [])
    for _ in range(reuse_pool):
        submission_id = new_id()
        write_task(services, {**REQUEST, "client_submission_id": submission_id}, tenant=TENANT)
        backend.reuse_ids.append(submission_id)
    return backend


def new_id() -> str:
    return "b-" + uuid.uuid4().hex


def op_bare(backend: Backend, _index: int) -> None:
    row = {**backend.bare_row, "task_id": "BARE-" + uuid.uuid4().hex[:24]}
    with backend.store.transaction() as connection:
        connection.execute(insert(backend.bare).values(**row))


def op_bare_driver(backend: Backend, _index: int) -> None:
    assert backend.driver is not None
    connection = backend.driver.get()
    try:
        row = {**backend.bare_row, "task_id": "BARE-" + uuid.uuid4().hex[:24]}
        params = driver_values(list(backend.bare.columns), row)
        connection.execute(backend.driver_sql, params)
        connection.commit()
    finally:
        backend.driver.put(connection)


def op_create(backend: Backend, _index: int) -> None:
    result = write_task(
        backend.services, {**REQUEST, "client_submission_id": new_id()}, tenant=TENANT
    )
    assert result.action_taken, result


def op_reuse(backend: Backend, index: int) -> None:
    submission_id = backend.reuse_ids[index % len(backend.reuse_ids)]
    result = write_task(
        backend.services, {**REQUEST, "client_submission_id": submission_id}, tenant=TENANT
    )
    assert not result.action_taken, result


def op_dbos_start(_backend: Backend, _index: int) -> None:
    from bench.peers.dbos_submit import start

    start(new_id(), REQUEST)


def op_dbos_replay(backend: Backend, index: int) -> None:
    from bench.peers.dbos_submit import start

    assert backend.dbos_replay_ids
    start(backend.dbos_replay_ids[index % len(backend.dbos_replay_ids)], REQUEST)


def op_dbos_enqueue(_backend: Backend, _index: int) -> None:
    from bench.peers.dbos_submit import enqueue

    enqueue(new_id(), REQUEST)


OPERATIONS: dict[str, Callable[[Backend, int], None]] = {
    "bare": op_bare,
    "create": op_create,
    "reuse": op_reuse,
    "bare/driver": op_bare_driver,
    "dbos start": op_dbos_start,
    "dbos replay": op_dbos_replay,
    "dbos enqueue": op_dbos_enqueue,
}


def throughput(backend: Backend, variant: str, clients: int, ops: int) -> float:
    """ops/s of ``ops`` operations spread over ``clients`` threads started together."""
    operation = OPERATIONS[variant]
    per_client = max(1, ops // clients)
    if clients == 1:
        started = time.perf_counter()
        for i in range(per_client):
            operation(backend, i)
        return per_client / (time.perf_counter() - started)
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def client(offset: int) -> None:
        barrier.wait()
        try:
            for i in range(per_client):
                operation(backend, offset * per_client + i)
        except BaseException as error:  # report, don't hang the barrier
            errors.append(error)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return per_client * clients / elapsed
