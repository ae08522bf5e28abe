"""Schema migrations (alembic): ``surehand db upgrade`` and first use of an embedded SQLite file."""

from __future__ import annotations

import functools
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, exc, inspect, text

from surehand.store.transactions import translate

if TYPE_CHECKING:
    from alembic.config import Config

# alembic is imported only to migrate: a process whose database is current (every CLI read)
# checks the revision with one SELECT and never imports it.
MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_version"  # alembic's default; migrations/env.py keeps it
_LOCK = threading.Lock()
_REVISION = re.compile(r"^revision\s*(?::[^=]*)?=\s*[\"']([^\"']+)[\"']", re.MULTILINE)
_DOWN = re.compile(r"^down_revision\s*(?::[^=]*)?=\s*[\"']([^\"']+)[\"']", re.MULTILINE)


def _config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@functools.cache
def head_revision() -> str:
    """The newest migration this version of surehand ships: the one revision of
    ``migrations/versions`` that no other names as its ``down_revision`` (the chain is
    linear; a test checks this against alembic's own ``ScriptDirectory``)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in MIGRATIONS.glob("versions/*.py"):
        source = script.read_text(encoding="utf-8")
        revisions.update(_REVISION.findall(source))
        parents.update(_DOWN.findall(source))
    heads = revisions - parents
    assert len(heads) == 1, f"migrations must have one head, not {sorted(heads)}"
    return heads.pop()


def current_revision(engine: Engine) -> str | None:
    """The migration the database is at, or None for an empty database."""
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(VERSION_TABLE):
                return None
            found = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            return found.scalar()
    except exc.SQLAlchemyError as error:
        raise translate(error) from error


def upgrade(engine: Engine) -> str:
    """Apply every pending migration; safe to run concurrently. Returns the new revision."""
    from alembic import command

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


def ping(connection: Connection) -> None:
    """One round trip (``SELECT 1``): the database answers (a readiness probe's first question)."""
    connection.execute(text("SELECT 1"))
