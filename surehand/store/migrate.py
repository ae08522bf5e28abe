"""Schema migrations (alembic): ``surehand db upgrade`` and first use of an embedded SQLite file."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, exc

from surehand.store.engine import translate

MIGRATIONS = Path(__file__).parent / "migrations"
_LOCK = threading.Lock()


def _config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest migration this version of surehand ships."""
    head = ScriptDirectory.from_config(_config("")).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at, or None for an empty database."""
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except exc.SQLAlchemyError as error:
        raise translate(error) from error


def upgrade(engine: Engine) -> str:
    """Apply every pending migration; safe to run concurrently. Returns the new revision."""
    config = _config(engine.url.render_as_string(hide_password=False))
    try:
        # alembic keeps the running migration's context in module globals: one at a time per
        # process. Across processes the database serialises them (BEGIN IMMEDIATE on SQLite,
        # an advisory lock on Postgres; see migrations/env.py).
        with _LOCK, engine.connect() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            connection.commit()
    except exc.SQLAlchemyError as error:
        raise translate(error) from error
    return head_revision()


def is_current(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()
