"""Postgres databases of the benchmarks: each bench works in its own, never in a shared one."""

from __future__ import annotations

from sqlalchemy import URL, create_engine, text
from sqlalchemy.engine import make_url


def fresh_database(admin_url: str, name: str) -> URL:
    """Drop ``name`` (closing its connections) and create it empty; its SQLAlchemy URL."""
    parsed = make_url(admin_url)
    admin = create_engine(parsed, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return parsed.set(database=name)


def libpq(url: URL | str) -> str:
    """The libpq form of a SQLAlchemy URL (for psycopg and DBOS), password kept."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
