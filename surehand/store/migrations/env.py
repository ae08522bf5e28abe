"""Alembic environment: runs on the connection handed in by ``surehand.store.migrate``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from surehand.store.engine import make_engine
from surehand.store.schema import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # Two processes upgrading at once take turns instead of racing on DDL.
            connection.execute(text("SELECT pg_advisory_xact_lock(7427812)"))
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as fresh:
        _run(fresh)


if context.is_offline_mode():  # pragma: no cover - offline SQL generation is not supported
    raise SystemExit("surehand migrations run online only: use `surehand db upgrade`")
run_migrations_online()
