"""The session protocol explored by a machine (``tests/explore_protocol.py``), on SQLite and
Postgres, with the lease scripts on fakeredis and on a real redis-server.

The default suite runs a fixed, derandomised budget (``tests/explore_world.py``);
``./scripts/test --explore`` runs a large random one. Counterexamples it found are kept below
as plain regression tests.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis.stateful import run_state_machine_as_test

from surehand.queue.redis_client import connect_redis
from surehand.store import Store
from tests.explore_protocol import ProtocolMachine, World
from tests.explore_world import Crashes, budget
from tests.redis_fixtures import real_redis_url


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def world(
    request: pytest.FixtureRequest, store: Store, monkeypatch: pytest.MonkeyPatch
) -> Iterator[World]:
    url = real_redis_url() if request.param == "redis" else ""
    client = connect_redis(url)
    crashes = Crashes()
    crashes.install(monkeypatch)
    yield World(store, client, crashes)
    client.close()


def test_the_session_protocol_keeps_its_invariants_in_every_interleaving(world: World) -> None:
    run_state_machine_as_test(lambda: ProtocolMachine(world), settings=budget())  # type: ignore[arg-type]  # a factory works (hypothesis documents it)
