"""What the doors ask about the store itself, not about its TASKs: whether it answers, which
migration it is at, what ``surehand check`` warns about (TASKs that cannot be dispatched, probes
open intents name). Read through the service layer like every other read (queries.py)."""

from __future__ import annotations

from surehand.dispatcher.context import Services
from surehand.store import migrate, operations, task_publishing


def is_ready(services: Services) -> bool:
    """Whether the schema is at the newest migration, once the database answered one query
    (a store that does not answer raises its SurehandError)."""
    with services.store.snapshot() as connection:
        migrate.ping(connection)
    return migrate.is_current(services.store.engine)


def schema_revision(services: Services) -> str | None:
    """The migration the database is at (None: an empty database)."""
    return migrate.current_revision(services.store.engine)


def newest_revision() -> str:
    """The newest migration this version ships."""
    return migrate.head_revision()


def count_undispatchable(services: Services) -> int:
    """How many TASKs, of every tenant, the sweep skips because they cannot be dispatched."""
    with services.store.snapshot() as connection:
        return task_publishing.count_undispatchable(connection)


def probes_of_open_intents(services: Services) -> dict[str, list[str]]:
    """Probe name -> the TASK ids of the open intents naming it, oldest first."""
    named: dict[str, list[str]] = {}
    with services.store.snapshot() as connection:
        for probe, task_id in operations.probes_of_open_intents(connection):
            named.setdefault(probe, []).append(task_id)
    return named
