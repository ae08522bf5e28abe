"""Migrations build exactly the schema the code declares, on SQLite and Postgres, and apply
idempotently (a second upgrade, or a concurrent one, changes nothing); 0019 converts the rows
of the retired receipt stages and downgrades."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, String, column, create_engine, insert, select, table, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import NullPool

from surehand.config import Settings
from surehand.digest import request_digest, sha256_hex
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.fcop.render import render_task
from surehand.model import DIGEST_SCHEMA_VERSION, Bucket, Disposition, task_path
from surehand.store import Store, migrate, receipts, schema, task_columns, tasks
from surehand.store.column_types import UTCDateTime
from surehand.store.schema import metadata
from surehand.testing import ManualClock
from tests.submission_helpers import TENANT, fields_of, request


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a SQLite file, or a Postgres database of its own (never the shared
    test database, whose schema other tests in this worker rely on)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        return
    base = make_url(request.getfixturevalue("pg_url"))
    name = f"{base.database}_mig"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield base.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_migrations_build_exactly_the_declared_schema(empty_url: str) -> None:
    store = Store(empty_url, auto_upgrade=False)
    assert migrate.current_revision(store.engine) is None

    assert store.upgrade() == migrate.head_revision()

    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    assert differences == []
    store.dispose()


def test_upgrading_twice_or_concurrently_changes_nothing(empty_url: str) -> None:
    stores = [Store(empty_url, auto_upgrade=False) for _ in range(4)]
    threads = [threading.Thread(target=store.upgrade) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert all(migrate.is_current(store.engine) for store in stores)
    assert stores[0].upgrade() == migrate.head_revision()
    for store in stores:
        store.dispose()


def test_a_deployment_store_refuses_an_old_schema_with_a_next_step(empty_url: str) -> None:
    from surehand.errors import SchemaNotReady

    store = Store(empty_url, auto_upgrade=False)
    with pytest.raises(SchemaNotReady, match="surehand db upgrade"):
        store.ensure_schema()
    store.dispose()


# -- 0019: the receipt stages retire ------------------------------------------------------------

DAY = datetime(2026, 11, 30, 9, tzinfo=UTC)
# The receipts table as revision 0018 has it (holder and held_until; three states).
OLD_RECEIPTS = table(
    "receipts",
    column("tenant", String()),
    column("client_submission_id", String()),
    column("digest_schema_version", String()),
    column("request_digest", String()),
    column("task_id", String()),
    column("task_path", String()),
    column("state", String()),
    column("holder", String()),
    column("held_until", UTCDateTime()),
    column("document_digest", String()),
    column("result", JSON()),
    column("created_at", UTCDateTime()),
    column("updated_at", UTCDateTime()),
)


@pytest.fixture
def at_0018(empty_url: str) -> str:
    """A database migrated to 0018, the last revision with the receipt stages."""
    engine = create_engine(empty_url, poolclass=NullPool)
    config = migrate._config(empty_url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0018")
    engine.dispose()
    return empty_url


def _old_receipt(sid: str, task_id: str, state: str, **values: object) -> dict[str, object]:
    fields = fields_of(request(client_submission_id=sid))
    return {
        "tenant": TENANT,
        "client_submission_id": sid,
        "digest_schema_version": DIGEST_SCHEMA_VERSION,
        "request_digest": request_digest(fields),
        "task_id": task_id,
        "task_path": task_path(Bucket.INBOX, task_id, "PM", "DEV"),
        "state": state,
        "holder": None if state == "committed" else "dead-writer",
        "held_until": None if state == "committed" else DAY + timedelta(seconds=30),
        "document_digest": None,
        "result": None,
        "created_at": DAY,
        "updated_at": DAY,
        **values,
    }


def _task_row(task_id: str, sid: str | None, tenant: str = TENANT) -> dict[str, object]:
    data = request(client_submission_id=sid) if sid else request(subject="Unrelated")
    fields = fields_of(data)
    document = render_task(task_id, fields, created_at=DAY, submission_id=sid)
    return task_columns.new_row(
        task_id=task_id,
        tenant=tenant,
        fields=fields,
        submission_id=sid,
        request_digest=request_digest(fields),
        document=document,
        document_digest=sha256_hex(document),
        now=DAY,
    )


def _seed_stages(url: str) -> dict[str, dict[str, object]]:
    """Receipts in every old stage, with and without their TASK; returns the TASK rows."""
    rows = {
        "T-1": _task_row("TASK-20261130-001", "reserved-with-task"),
        "T-2": _task_row("TASK-20261130-002", "created-with-task"),
        "T-4": _task_row("TASK-20261130-004", None),  # a legacy TASK at a preallocated id
        "T-6": _task_row("TASK-20261130-006", "committed"),
    }
    receipts_rows = [
        _old_receipt("reserved-with-task", "TASK-20261130-001", "reserved"),
        # Its document digest was taken before the document was edited: the stored one wins.
        _old_receipt(
            "created-with-task", "TASK-20261130-002", "task_created", document_digest="0" * 64
        ),
        _old_receipt("reserved-without-task", "TASK-20261130-003", "reserved"),
        _old_receipt("created-at-a-foreign-task", "TASK-20261130-004", "task_created"),
        _old_receipt("created-without-task", "TASK-20261130-005", "task_created"),
        _old_receipt(
            "committed",
            "TASK-20261130-006",
            "committed",
            document_digest=rows["T-6"]["document_digest"],
            result={"disposition": "created", "task_id": "TASK-20261130-006"},
        ),
    ]
    rows["T-2"]["document"] = str(rows["T-2"]["document"]) + "edited by hand\n"
    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as connection:
        connection.execute(insert(schema.tasks), list(rows.values()))
        connection.execute(insert(OLD_RECEIPTS), receipts_rows)
    engine.dispose()
    return rows


def _created_result(sid: str, task_id: str) -> dict[str, object]:
    return {
        "disposition": "created",
        "action_taken": True,
        "task_id": task_id,
        "task_path": task_path(Bucket.INBOX, task_id, "PM", "DEV"),
        "client_submission_id": sid,
        "request_digest": request_digest(fields_of(request(client_submission_id=sid))),
        "digest_schema_version": DIGEST_SCHEMA_VERSION,
        "receipt_state": "committed",
        "idempotent": True,
        "conflict": None,
    }


def test_0019_commits_receipts_with_their_task_and_deletes_the_others(at_0018: str) -> None:
    rows = _seed_stages(at_0018)
    store = Store(at_0018, auto_upgrade=False)
    assert store.upgrade() == migrate.head_revision()

    with store.snapshot() as connection:
        found = {r.client_submission_id: r for r in connection.execute(select(schema.receipts))}
    assert sorted(found) == ["committed", "created-with-task", "reserved-with-task"]
    for sid, key in (("reserved-with-task", "T-1"), ("created-with-task", "T-2")):
        receipt = found[sid]
        assert receipt.state == "committed"
        assert receipt.result == _created_result(sid, str(rows[key]["task_id"]))
        assert receipt.document_digest == sha256_hex(str(rows[key]["document"]))
        assert (receipt.created_at, receipt.updated_at) == (DAY, DAY)
    committed = found["committed"]
    assert committed.result == {"disposition": "created", "task_id": "TASK-20261130-006"}
    assert committed.document_digest == rows["T-6"]["document_digest"]

    # A retry is answered reused under the original identity where the TASK exists, and
    # creates the TASK anew (under a new number) where nothing was created. (The next day:
    # the seeded TASKs took their numbers without the counter.)
    services = Services(store=store, settings=Settings(), clock=ManualClock(DAY + timedelta(1)))
    kept = write_task(services, request(client_submission_id="reserved-with-task"), tenant=TENANT)
    assert (kept.disposition, kept.task_id) == (Disposition.REUSED, "TASK-20261130-001")
    anew = write_task(
        services, request(client_submission_id="reserved-without-task"), tenant=TENANT
    )
    assert anew.disposition is Disposition.CREATED
    assert (anew.task_id or "").startswith("TASK-20261201-")
    with store.snapshot() as connection:
        assert tasks.count(connection) == 5

    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    assert differences == []
    store.dispose()


def test_0019_refuses_a_stage_and_downgrades_back_to_it(at_0018: str) -> None:
    _seed_stages(at_0018)
    store = Store(at_0018, auto_upgrade=False)
    store.upgrade()
    with pytest.raises(IntegrityError), store.engine.begin() as connection:
        connection.execute(
            update(schema.receipts)
            .values(state="reserved")
            .where(schema.receipts.c.client_submission_id == "committed")
        )

    config = migrate._config(at_0018)
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0018")
    assert migrate.current_revision(store.engine) == "0018"
    with store.engine.begin() as connection:
        connection.execute(
            insert(OLD_RECEIPTS),
            [_old_receipt("reserved-again", "TASK-20261130-009", "reserved")],
        )
        states = connection.execute(
            select(OLD_RECEIPTS.c.client_submission_id, OLD_RECEIPTS.c.state, OLD_RECEIPTS.c.holder)
        ).all()
    assert sorted(states) == [
        ("committed", "committed", None),
        ("created-with-task", "committed", None),
        ("reserved-again", "reserved", "dead-writer"),
        ("reserved-with-task", "committed", None),
    ]
    assert store.upgrade() == migrate.head_revision()  # and up again: the new row has no TASK
    with store.snapshot() as connection:
        assert receipts.count(connection) == 3
    store.dispose()
