"""Row ids as shown: operation and event ids that reveal no volume.

Operations and history events are numbered by the database's autoincrement, one sequence for
all tenants: shown as they are, two operation ids of one tenant would tell how many operations
every tenant recorded in between. So the store keeps the autoincrement internal and shows
``present(id)``: a keyed permutation of ``[1, SPAN]`` (the Feistel network of
:mod:`surehand.store.numbering`) under a key that migration 0009 put in the ``counters`` row
``(ROWIDS, -)`` and no door shows. It is a bijection, so shown ids are unique and map back
(:func:`internal`); every shown id has the same range whatever the volume, and stays below
2**53 so JSON clients (JavaScript) read it exactly.

Every function of the store that returns an operation or event id shows it; every one that
takes an operation id maps it back. Nothing above the store sees an internal id.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.dialects import postgresql, sqlite

from surehand.errors import SchemaNotReady
from surehand.store import numbering
from surehand.store.schema import counters

SPAN = 10**15 - 1  # shown ids are 1 .. 10**15 - 1 (< 2**53)
ROWIDS = ("ROWIDS", "-")

_keys: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _key(connection: Connection) -> str:
    engine = connection.engine
    with _lock:
        found = _keys.get(engine)
    if found is not None:
        return found
    secret = _read(connection)
    if secret is None:  # made by migration 0009; made again if someone emptied the counters
        connection.execute(_create(connection.dialect.name))
        secret = _read(connection)
    if secret is None:
        raise SchemaNotReady("the id key (migration 0009) is missing: run `surehand db upgrade`")
    with _lock:
        _keys[engine] = secret
    return secret


def _read(connection: Connection) -> str | None:
    query = select(counters.c.secret).where(
        counters.c.kind == ROWIDS[0], counters.c.day == ROWIDS[1]
    )
    found = connection.execute(query).scalar_one_or_none()
    return None if found is None else str(found)


def _create(dialect: str) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    row = {"kind": ROWIDS[0], "day": ROWIDS[1], "last": 0, "secret": numbering.new_secret()}
    return insert(counters).values(**row).on_conflict_do_nothing()


def shown(connection: Connection, internal_id: int) -> int:
    """The id a caller sees for the row ``internal_id``."""
    if not 1 <= internal_id <= SPAN:
        raise ValueError(f"row id {internal_id} is outside 1..{SPAN}")
    return 1 + numbering.permute(internal_id - 1, SPAN, _key(connection))


def shown_or_none(connection: Connection, internal_id: int | None) -> int | None:
    return None if internal_id is None else shown(connection, internal_id)


def internal(connection: Connection, shown_id: int) -> int:
    """The row behind a shown id (a number no row has maps to one no row has: 0 if it is out
    of range, so lookups find nothing rather than fail)."""
    if isinstance(shown_id, bool) or not isinstance(shown_id, int) or not 1 <= shown_id <= SPAN:
        return 0
    return 1 + numbering.unpermute(shown_id - 1, SPAN, _key(connection))


def internal_or_none(connection: Connection, shown_id: int | None) -> int | None:
    return None if shown_id is None else internal(connection, shown_id)
