"""TASK numbers reveal no volume: one global counter per day, shown through a keyed
permutation (surehand/store/numbering.py), on SQLite and Postgres.

Before: ids were numbered 001, 002, ... for all tenants together, so a tenant read the other
tenants' volume off the gaps between its own ids.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, event, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from surehand import Surehand
from surehand.config import Settings
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.model import Disposition, WriteTaskResult
from surehand.requests import TASK_ID_RE
from surehand.store import Store, migrate, numbering
from surehand.store import schema as tables
from surehand.store.driver import DriverStatement
from surehand.testing import ManualClock
from tests.skips import not_applicable
from tests.submission_helpers import counter_rows, request, seed_counter, shown_id

DAY = "20261130"  # the ManualClock's default day
FIXED_KEY = "00112233445566778899aabbccddeeff"


def submit(services: Services, tenant: str, sid: str | None) -> WriteTaskResult:
    return write_task(services, request(client_submission_id=sid), tenant=tenant)


def number_of(task_id: str | None) -> int:
    assert task_id is not None
    assert TASK_ID_RE.match(task_id), task_id
    return int(task_id.rsplit("-", 1)[1])


# -- the permutation --------------------------------------------------------------------------


def keys(count: int) -> list[str]:
    """Deterministic keys: the tests below never depend on a lucky draw."""
    return [hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(count)]


@pytest.mark.parametrize(("low", "high"), [(1, 999), (1000, 9999), (10_000, 99_999)])
def test_each_width_of_numbers_is_permuted_onto_itself(low: int, high: int) -> None:
    """Every counter value gets its own number with as many digits (at least three): unique
    and never reused within a day, and ids keep the documented format."""
    for key in keys(2):
        shown = [numbering.present(n, key) for n in range(low, high + 1)]
        assert sorted(shown) == list(range(low, high + 1))


def test_a_number_says_nothing_about_the_counter_value_behind_it() -> None:
    """What a tenant that creates TASKs 3rd and 54th of the day sees, over many days (keys):
    the gap between its two numbers is spread over the whole range, so it cannot tell that 50
    TASKs of other tenants came in between (with sequential numbers the gap was always 51)."""
    gaps = [numbering.present(54, key) - numbering.present(3, key) for key in keys(400)]
    assert sum(gap == 51 for gap in gaps) <= 4  # about 1 in 999 by chance
    assert sum(gap < 0 for gap in gaps) > 120  # order is not kept either (about half)
    assert len(set(gaps)) > 300


def test_without_a_key_a_day_counted_before_the_migration_continues_sequentially() -> None:
    assert [numbering.present(n, None) for n in (1, 2, 999, 1000)] == [1, 2, 999, 1000]


# -- through write_task, on both databases ---------------------------------------------------


@pytest.fixture
def fixed_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(numbering, "new_secret", lambda: FIXED_KEY)
    return FIXED_KEY


def test_two_tenants_on_one_day_cannot_read_each_others_volume_from_their_ids(
    services: Services, fixed_key: str
) -> None:
    acme = [submit(services, "acme", f"a{i}") for i in range(3)]
    globex = [submit(services, "globex", f"g{i}") for i in range(50)]
    acme += [submit(services, "acme", f"a{i}") for i in range(3, 6)]

    ids = [r.task_id for r in acme + globex]
    assert len(set(ids)) == 56  # one global key space: never two TASKs with one id
    counted = [1, 2, 3, 54, 55, 56]  # acme's places in the day's count
    assert [number_of(r.task_id) for r in acme] == [
        numbering.present(n, fixed_key) for n in counted
    ]
    # Read as sequential numbers (the old scheme), acme's ids would not give globex's volume.
    numbers = [number_of(r.task_id) for r in acme]
    assert numbers[3] - numbers[2] - 1 != 50
    assert numbers != sorted(numbers)


def test_the_days_key_is_made_by_its_first_allocation_and_never_changes(
    services: Services, clock: ManualClock
) -> None:
    first = submit(services, "acme", "k1")
    key = _key(services.store, DAY)
    assert key is not None
    assert len(key) == 32
    second = submit(services, "acme", None)  # the legacy path allocates through the same row
    assert _key(services.store, DAY) == key
    assert [first.task_id, second.task_id] == [shown_id(services.store, DAY, n) for n in (1, 2)]
    clock.advance(86_400)
    submit(services, "acme", "k3")
    assert _key(services.store, "20261201") not in (None, key)  # a key per day


def test_a_day_counted_before_the_migration_keeps_counting_sequentially(
    services: Services,
) -> None:
    """A counter row without a key (every row that migration 0008 found) continues its day's
    sequence, so none of the ids it already gave out is handed out again."""
    seed_counter(services.store, DAY, 5)
    assert submit(services, "acme", "after-upgrade").task_id == f"TASK-{DAY}-006"
    assert submit(services, "acme", None).task_id == f"TASK-{DAY}-007"


def test_concurrent_creates_get_distinct_ids_from_the_day_count(services: Services) -> None:
    barrier = threading.Barrier(8)

    def create(n: int) -> WriteTaskResult:
        barrier.wait()
        return submit(services, f"tenant-{n % 2}", f"c{n}")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(create, range(8)))

    assert all(r.disposition is Disposition.CREATED for r in results)
    shown = {shown_id(services.store, DAY, n) for n in range(1, 9)}
    assert {r.task_id for r in results} == shown
    assert counter_rows(services.store) == [("TASK", DAY, 8)]


def test_the_default_single_tenant_deployment_gets_documented_ids(tmp_path: Path) -> None:
    with Surehand(f"sqlite:///{tmp_path / 'default.sqlite3'}") as sh:
        ids = [sh.write_task(request(client_submission_id=f"d{i}")).task_id for i in range(5)]
    assert all(task_id is not None and TASK_ID_RE.match(task_id) for task_id in ids)
    assert all(len((task_id or "").rsplit("-", 1)[1]) == 3 for task_id in ids)
    assert len(set(ids)) == 5


def test_a_create_on_postgres_is_still_two_statements_and_no_transaction(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The number is presented in Python from the key the allocating statement returns: no
    extra round trip (the receipt-or-number read, then the one-statement create)."""
    if services.store.dialect != "postgresql":
        not_applicable("SQLite runs in-process: no round trips")
    submit(services, "acme", "warm-up")  # schema check and compiled statements cached
    sent: list[str] = []
    execute = DriverStatement._execute

    def counting(self: DriverStatement, connection: Any, *args: Any) -> Any:
        sent.append("driver")
        return execute(self, connection, *args)

    monkeypatch.setattr(DriverStatement, "_execute", counting)
    with CoreStatements(services.store) as core:
        created = submit(services, "acme", "counted")
    assert created.disposition is Disposition.CREATED
    assert (sent, core) == (["driver", "driver"], [])


# -- the migration ----------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def at_0007(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database migrated to 0007 (before keys) with a counter for today and yesterday."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
        yield from _migrated_to_0007(url)
        return
    base = make_url(request.getfixturevalue("pg_url"))
    name = f"{base.database}_numbering"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield from _migrated_to_0007(base.set(database=name).render_as_string(hide_password=False))
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _migrated_to_0007(url: str) -> Iterator[str]:
    engine = create_engine(url, poolclass=NullPool)
    config = migrate._config(url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0007")
        rows = [{"kind": "TASK", "day": DAY, "last": 41}, {"kind": "REPORT", "day": DAY, "last": 3}]
        connection.execute(insert(tables.counters).values(rows))
    engine.dispose()
    yield url


def test_the_migration_keeps_issued_numbers_and_permutes_only_new_days(at_0007: str) -> None:
    store = Store(at_0007, auto_upgrade=True)
    try:
        clock = ManualClock()
        settings = Settings()
        services = Services(store=store, settings=settings, clock=clock)
        assert submit(services, "acme", "same-day").task_id == f"TASK-{DAY}-042"
        clock.advance(86_400)
        next_day = submit(services, "acme", "next-day")
        assert next_day.task_id == shown_id(store, "20261201", 1)
        assert _key(store, DAY) is None
        assert _key(store, "20261201") is not None
    finally:
        store.dispose()


def _key(store: Store, day: str) -> str | None:
    c = tables.counters.c
    with store.snapshot() as connection:
        found = connection.execute(
            select(c.secret).where(c.kind == "TASK", c.day == day)
        ).scalar_one_or_none()
    return None if found is None else str(found)


class CoreStatements:
    """Collects the statements (and BEGINs) Core sends on the store's engines."""

    def __init__(self, store: Store) -> None:
        self.engines = {store.engine, store.one_statement_engine, store._async_commit_engine}
        self.sent: list[str] = []

    def _on_execute(self, _connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.sent.append(statement)

    def _on_begin(self, _connection: Any) -> None:
        self.sent.append("BEGIN")

    def __enter__(self) -> list[str]:
        for engine in self.engines:
            event.listen(engine, "before_cursor_execute", self._on_execute)
            event.listen(engine, "begin", self._on_begin)
        return self.sent

    def __exit__(self, *_: object) -> None:
        for engine in self.engines:
            event.remove(engine, "before_cursor_execute", self._on_execute)
            event.remove(engine, "begin", self._on_begin)
