"""worker and api wait at start for a database that is restarting, never for a mistake."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from surehand.cli.common import wait_for_store
from surehand.config import Settings
from surehand.errors import DatabaseMissing, StoreUnavailable


class FlakyStore:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0

    def ensure_schema(self) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


def handle(store: FlakyStore, wait: float) -> Any:
    return SimpleNamespace(store=store, settings=Settings(startup_wait_seconds=wait))


@pytest.fixture(autouse=True)
def no_sleeping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("surehand.cli.common.time.sleep", lambda _seconds: None)


def test_a_database_that_refuses_connections_for_a_moment_is_waited_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = FlakyStore([StoreUnavailable("connection refused")] * 3)
    wait_for_store(handle(store, 30.0), "worker")
    assert store.calls == 4
    assert "worker: waiting for the database (connection refused)" in capsys.readouterr().err


def test_a_missing_database_fails_at_once() -> None:
    store = FlakyStore([DatabaseMissing('database "nope" does not exist')])
    with pytest.raises(DatabaseMissing):
        wait_for_store(handle(store, 30.0), "worker")
    assert store.calls == 1


def test_the_wait_is_bounded_by_its_setting() -> None:
    store = FlakyStore([StoreUnavailable("connection refused")] * 100)
    with pytest.raises(StoreUnavailable):
        wait_for_store(handle(store, 0.0), "api")
    assert store.calls == 1
