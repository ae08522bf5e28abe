"""The session protocol explored by a machine (``tests/explore_protocol.py``), on SQLite and
Postgres, with the lease scripts on fakeredis and on a real redis-server.

The default suite runs a fixed, derandomised budget (``tests/explore_world.py``);
``./scripts/test --explore`` runs a large random one. Counterexamples it found are kept below
as plain regression tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test

from surehand.crashpoints import CrashPoint
from surehand.model import Bucket
from surehand.queue.redis_client import connect_redis
from surehand.store import Store, tasks
from tests.explore_protocol import GRACE, TTL, ProtocolMachine, World
from tests.explore_world import DEFAULT_EXAMPLES, Crashes, budget
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


# Each example opens with a hazard (explore_protocol.HAZARDS), so fewer steps reach as far.
STEPS = 30
# Postgres runs the first of the same derandomised examples: the protocol code is the same,
# only its SQL differs (and each example costs three times as much there).
POSTGRES_EXAMPLES = 15


def test_the_session_protocol_keeps_its_invariants_in_every_interleaving(world: World) -> None:
    examples = POSTGRES_EXAMPLES if world.store.url.startswith("postgresql") else DEFAULT_EXAMPLES
    settings = budget(STEPS, examples)
    run_state_machine_as_test(lambda: ProtocolMachine(world), settings=settings)  # type: ignore[arg-type]  # a factory works (hypothesis documents it)


# -- counterexamples the exploration printed (mutants of bench/tools/explore_mutations.py) ----


def replay(world: World, *steps: tuple[str, dict[str, Any]]) -> None:
    """Run ``steps`` on a fresh machine as hypothesis does: the invariants after each."""
    machine = ProtocolMachine(world)
    try:
        machine.first_task()
        machine.protocol_holds()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.protocol_holds()
    finally:
        machine.teardown()


def test_a_heartbeat_gives_its_lease_up_when_redis_stays_away_for_a_ttl(world: World) -> None:
    replay(
        world,
        ("worker_starts", {"index": 0}),
        ("an_outage_lasts", {"after": 0, "passes": False, "rounds": 3}),
    )


def test_no_successor_is_admitted_for_a_lost_lease_while_redis_cannot_answer(
    world: World,
) -> None:
    replay(
        world,
        ("worker_starts", {"index": 0}),
        ("redis_goes_away", {"after": 0}),
        ("time_passes", {"seconds": 30.0}),
        ("recover", {"by": "PM", "index": 0}),
        ("end_after_lost_lease", {"index": 0}),
        ("a_while_passes_under_the_reconciler", {"seconds": 30.0}),
    )


def test_a_heartbeat_frozen_past_its_ttl_across_a_redis_restart_does_not_retake_its_lease(
    world: World,
) -> None:
    replay(
        world,
        ("worker_starts", {"index": 0}),
        ("a_pause_across_a_restart", {"seconds": 30.0}),
    )


def test_a_lost_attempt_ends_before_its_successor_runs(world: World) -> None:
    replay(
        world,
        ("worker_starts", {"index": 0}),
        ("a_while_passes_under_the_reconciler", {"seconds": 45.0, "owner": "killed"}),
        ("worker_starts", {"index": 0}),
    )


def test_an_unkeyed_effect_killed_before_its_outcome_is_not_run_again_by_a_successor(
    world: World,
) -> None:
    killed = CrashPoint.OPERATION_AFTER_EFFECT
    replay(
        world,
        ("worker_starts", {"index": 0}),
        ("operation", {"index": 0, "name": "email", "raises": False, "kill": killed}),
        ("a_while_passes_under_the_reconciler", {"seconds": 45.0}),
        ("worker_starts", {"index": 0}),
        ("operation", {"index": 0, "name": "email", "raises": False, "kill": None}),
    )


def test_only_the_approver_may_release_a_hold_by_review(world: World) -> None:
    replay(
        world,
        ("worker_starts", {"index": 0}),
        ("agent_raises", {"index": 0}),
        ("reconcile", {"which": 0}),
        ("review", {"index": 0, "by": "DEV", "effect": "absent"}),
        ("review", {"index": 0, "by": "QA", "effect": "present"}),
        ("review", {"index": 0, "by": "PM", "effect": "absent"}),
    )


def test_each_late_write_of_an_old_owner_is_refused_recorded_once_and_never_applied(
    world: World,
) -> None:
    """A frozen owner comes back after the reconciler judged it lost (before any successor,
    or after one started) and writes twice; an outcome comes late from an effect that outlived its
    owner's lease."""
    for write, successor in (("report", False), ("operation", False), ("outcome", True)):
        replay(
            world,
            ("worker_starts", {"index": 0}),
            ("an_old_owner_writes_late", {"index": 0, "write": write, "successor": successor}),
        )


def test_a_live_owner_keeps_its_lease_while_the_reconciler_watches(world: World) -> None:
    """Heartbeats run as the clock moves: a scheduled owner is never judged lost."""
    machine = ProtocolMachine(world)
    try:
        machine.first_task()
        machine.worker_starts(0)
        machine.a_while_passes_under_the_reconciler(TTL + GRACE, owner="beats")
        (owner,) = machine.model.actors
        assert owner.beat is not None
        assert not owner.beat.lost
        machine.an_operation(0, "charge", raises=False)
        machine.settle(0, killed_after_return=False)
        machine.protocol_holds()
        assert [run.attempt for run in machine.model.runs] == [1]  # by the live owner
        assert not machine.model.decisions  # no case was opened
        with world.store.snapshot() as connection:
            task = tasks.get(connection, machine.model.tasks[0])
        assert task is not None
        assert task.bucket is Bucket.REVIEW
    finally:
        machine.teardown()
