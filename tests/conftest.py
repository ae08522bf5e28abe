"""Shared fixtures: every store-backed test runs on SQLite and, when
``SUREHAND_TEST_DATABASE_URL`` is set (CI sets it), on Postgres too.

Locally a missing service skips its tests; under CI (``CI=true``) it fails them instead, and a
run whose skips are not all allowlisted not-applicable ones fails (``tests/skips.py``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from surehand.config import Settings
from surehand.dispatcher.context import Services
from surehand.store import Store
from surehand.store.schema import metadata
from surehand.testing import ManualClock
from tests.procs import TERMINATIONS
from tests.shared.marks import MARKERS
from tests.skips import IN_CI, missing, skip_reason, unexplained

# Every fixture more than one test module uses is defined once, here or in one of these
# modules; no test module imports a fixture or another test module (the rules:
# tests/project/test_fixture_sharing.py). A module comes after the plugins it imports (else pytest
# could not rewrite its asserts).
pytest_plugins = [
    "tests.redis_fixtures",
    "tests.git_remotes",
    "tests.shared.api",
    "tests.shared.browser",
    "tests.shared.chaos",
    "tests.shared.cli",
    "tests.shared.doors",
    "tests.shared.misconfig",
    "tests.shared.probes_processes",
    "tests.recovery_helpers",
    "tests.session_helpers",
    "tests.shared.console_actions",
    "tests.shared.session_mcp",
    "tests.shared.workers",
    "tests.agent_runtime",
    "tests.shared.agent_clis",
    "tests.shared.hostile_agents",
]

# The developer's shell must not leak into tests.
for _name in list(os.environ):
    if _name.startswith("SUREHAND_") and not _name.startswith("SUREHAND_TEST_"):
        del os.environ[_name]

PG_URL = os.environ.get("SUREHAND_TEST_DATABASE_URL", "")
REDIS_URL = os.environ.get("SUREHAND_TEST_REDIS_URL", "")


def require(url: str, what: str) -> str:
    """The service URL, or skip (locally) / fail (in CI) when it is not configured."""
    if url:
        return url
    missing(f"a {what} (set SUREHAND_TEST_{what.upper()}_URL)")


_SKIPPED: list[tuple[str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    for description in MARKERS.values():
        config.addinivalue_line("markers", description)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember every skip (under xdist the controller sees the workers' reports)."""
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append((report.nodeid, skip_reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _SKIPPED.append((report.nodeid, skip_reason(report)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skip that is not an allowlisted not-applicable one fails the run."""
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller sees every report and decides
    if IN_CI and exitstatus == pytest.ExitCode.OK and unexplained(_SKIPPED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    refused = unexplained(_SKIPPED)
    if IN_CI and refused:
        terminalreporter.section("skips CI does not accept (tests/skips.py)", red=True)
        for test, reason in refused:
            terminalreporter.line(f"{test}: {reason}")


def _admin(url: str) -> Engine:
    return create_engine(make_url(url), isolation_level="AUTOCOMMIT", poolclass=NullPool)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh Postgres database for this test run (and xdist worker), dropped afterwards, so
    concurrent runs on one server never share rows or schema versions."""
    base = require(PG_URL, "database")
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)[:8]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    parsed = make_url(base)
    name = f"{parsed.database}_sh_{run}_{worker}"
    admin = _admin(base)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield parsed.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def _pg_store(pg_url: str) -> Iterator[Store]:
    store = Store(pg_url, auto_upgrade=True)
    store.ensure_schema()
    yield store
    store.dispose()


def truncate(store: Store, *, renewed: bool = False) -> None:
    """Empty every table of ``store`` (the Postgres database an xdist worker's tests share),
    except the key that shows row ids (``store/opaque.py``): processes that cached it keep it."""
    names = ", ".join(
        f'"{table.name}"' for table in metadata.sorted_tables if table.name != "counters"
    )
    try:
        with store.engine.begin() as connection:
            connection.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
            connection.execute(text("DELETE FROM counters WHERE kind <> 'ROWIDS'"))
    except DBAPIError as error:
        if renewed or not error.connection_invalidated:
            raise
        # An earlier test killed this database's backends (pg_terminate_backend): every pool
        # on its URL holds dead connections. Replace them all, not only the one that noticed.
        _renew_pools(store)
        truncate(store, renewed=True)


_terminations_seen = [0]


def _renew_pools(store: Store) -> None:
    for engine in (store.engine, store.one_statement_engine, store._async_commit_engine):
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A migrated, empty store on each backend."""
    if request.param == "sqlite":
        sqlite_store = Store(f"sqlite:///{tmp_path / 'surehand.sqlite3'}")
        sqlite_store.ensure_schema()
        yield sqlite_store
        sqlite_store.dispose()
        return
    pg_store: Store = request.getfixturevalue("_pg_store")
    if _terminations_seen[0] != TERMINATIONS[0]:  # an earlier test killed every backend
        _terminations_seen[0] = TERMINATIONS[0]
        _renew_pools(pg_store)
    truncate(pg_store)
    yield pg_store


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def services(store: Store, settings: Settings, clock: ManualClock) -> Services:
    return Services(store=store, settings=settings, clock=clock)
