"""Migrations build exactly the schema the code declares, on SQLite and Postgres, and apply
idempotently (a second upgrade, or a concurrent one, changes nothing)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from surehand.store import Store, migrate
from surehand.store.schema import metadata


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
