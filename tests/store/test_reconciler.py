"""The reconciler: suspicion and grace, Redis outages, concurrent passes, crash safety, publish.

Seeded states on both databases with a manual clock; leases on fakeredis (the lease scripts
themselves are proven on real Redis in ``test_leases.py``, and the reconciler on real Redis in
``test_admission.py`` and ``test_chaos.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner

from surehand.agents.context import SessionContext
from surehand.cli import app
from surehand.dispatcher import reconciler as reconciler_module
from surehand.dispatcher.admission import Admitter
from surehand.dispatcher.reconciler import PassReport, Reconciler, reconcile_loop
from surehand.dispatcher.sessions import Session
from surehand.errors import LeaseUnavailable
from surehand.model import (
    Admission,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    InterruptionCase,
    RetryPolicy,
)
from surehand.queue.keys import generation_key
from surehand.store import Store
from surehand.store import cases as case_rows
from surehand.testing import ManualClock
from tests.pool_watch import watch_pools
from tests.recovery_helpers import CHARGE_ARGS, GRACE_SECONDS, Rig, SwitchableLeases, open_rig


def missing_since(rig: Rig, session: Session) -> Any:
    return rig.attempt(session.attempt.attempt_id).lease_missing_since


def charging_agent(rig: Rig) -> None:
    def agent(ctx: SessionContext) -> str:
        key = f"{ctx.task.task_id}:charge"
        ctx.operation(
            "charge",
            CHARGE_ARGS,
            lambda: rig.ledger.perform(ctx, "charge", key),
            idempotency_key=key,
            retry_policy=RetryPolicy.KEYED,
        )
        return "charged"

    rig.sh.agent("DEV")(agent)


# -- suspicion and grace ---------------------------------------------------------------------


def test_a_lease_missing_for_less_than_the_grace_is_only_suspected(rig: Rig) -> None:
    task_id, session = rig.interrupted()
    first_seen = rig.clock.now()

    report = rig.reconcile()
    assert (report.running, report.live, report.suspected, report.lost) == (1, 0, 1, 0)
    assert report.next_due_seconds == GRACE_SECONDS
    assert missing_since(rig, session) == first_seen

    rig.clock.advance(GRACE_SECONDS - 0.1)
    report = rig.reconcile()
    assert (report.suspected, report.lost) == (1, 0)
    assert report.next_due_seconds == pytest.approx(0.1)
    assert missing_since(rig, session) == first_seen  # the first sighting counts
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING
    assert rig.cases_of(task_id) == []

    rig.clock.advance(0.1)
    report = rig.reconcile()
    assert (report.suspected, report.lost, report.admissions) == (0, 1, {"reexecute": 1})
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.SESSION_LOST


def test_a_lease_that_comes_back_clears_the_suspicion_and_restarts_the_grace(rig: Rig) -> None:
    task_id, session = rig.interrupted()
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS - 1)
    rig.hold_lease(session)  # e.g. the heartbeat put it back after a Redis restart

    report = rig.reconcile()
    assert (report.live, report.suspected) == (1, 0)
    assert missing_since(rig, session) is None

    assert rig.leases.release(task_id, session.attempt.attempt_id)
    second_seen = rig.clock.now()
    rig.reconcile()
    assert missing_since(rig, session) == second_seen
    rig.clock.advance(GRACE_SECONDS - 0.5)  # well past the first sighting's grace
    assert rig.reconcile().lost == 0
    rig.clock.advance(0.5)
    assert rig.reconcile().lost == 1


def test_the_grace_is_never_shorter_than_one_and_a_half_heartbeats(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    with open_rig(store, clock, tmp_path, heartbeat_seconds=10.0, lost_grace_seconds=0.5) as r:
        assert r.sh.reconciler.grace.total_seconds() == 15.0
        r.interrupted()
        r.reconcile()
        r.clock.advance(14.9)
        assert r.reconcile().lost == 0
        r.clock.advance(0.1)
        assert r.reconcile().lost == 1


# -- Redis outages ---------------------------------------------------------------------------


@pytest.fixture
def outage_rig(rig: Rig) -> tuple[Rig, SwitchableLeases]:
    """The rig with a lease store the test can make unreachable."""
    leases = SwitchableLeases(rig.sh.leases.client, rig.sh.settings.redis_namespace)
    rig.sh.runtime.__dict__["leases"] = leases  # before the first reconcile builds the admitter
    return rig, leases


def test_nothing_is_judged_while_redis_is_unreachable_and_the_outage_does_not_count(
    outage_rig: tuple[Rig, SwitchableLeases],
) -> None:
    rig, leases = outage_rig
    old_id, old = rig.interrupted()
    rig.reconcile()  # old is suspected from now on
    rig.clock.advance(GRACE_SECONDS * 3)

    leases.down = True
    new_id, new = rig.interrupted()
    report = rig.reconcile()

    assert not report.redis_ok
    assert (report.running, report.suspected, report.lost) == (0, 0, 0)
    assert rig.attempt(old.attempt.attempt_id).state is AttemptState.RUNNING
    assert missing_since(rig, new) is None  # nothing written about a lease it cannot see
    assert rig.cases_of(old_id) == rig.cases_of(new_id) == []

    rig.clock.advance(GRACE_SECONDS * 3)
    leases.down = False
    back = rig.clock.now()
    report = rig.reconcile()

    # Heartbeats could not restore any lease while Redis was away: the grace runs from now.
    assert report.redis_ok
    assert (report.suspected, report.lost) == (2, 0)
    assert report.next_due_seconds == GRACE_SECONDS
    assert missing_since(rig, new) == back
    rig.clock.advance(GRACE_SECONDS)
    assert rig.reconcile().lost == 2


def test_a_redis_that_lost_its_data_restarts_the_grace_of_every_suspect(rig: Rig) -> None:
    rig.leases.ensure_generation()
    _, session = rig.interrupted()
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS * 3)
    # Redis restarted empty; the first heartbeat after it minted a new generation marker.
    rig.leases.client.set(generation_key(rig.leases.namespace), "after-restart")

    report = rig.reconcile()
    assert (report.suspected, report.lost) == (1, 0)
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING
    rig.clock.advance(GRACE_SECONDS)
    assert rig.reconcile().lost == 1


def test_an_unchanged_redis_does_not_restart_the_grace(rig: Rig) -> None:
    rig.leases.ensure_generation()
    rig.interrupted()
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS * 3)
    assert rig.reconcile().lost == 1


# -- crash safety of a pass ------------------------------------------------------------------


def test_a_pass_that_dies_before_the_case_is_written_leaves_the_attempt_running(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id, session = rig.interrupted()
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS)

    def crash(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("reconciler process died")

    with monkeypatch.context() as patch:
        patch.setattr(case_rows, "open_case", crash)
        with pytest.raises(RuntimeError, match="reconciler process died"):
            rig.reconcile()

    # Nothing half-written: not lost without a case; the next pass does the whole step.
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING
    assert rig.events(task_id, EventKind.SESSION_LOST) == []
    assert rig.cases_of(task_id) == []
    report = rig.reconcile()
    assert (report.lost, report.admissions) == (1, {"reexecute": 1})
    assert len(rig.events(task_id, EventKind.SESSION_LOST)) == 1


def test_a_pass_that_dies_before_admission_leaves_a_case_the_next_pass_decides(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id, session = rig.interrupted()
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS)

    def crash(*_args: Any, **_kwargs: Any) -> InterruptionCase:
        raise RuntimeError("reconciler process died")

    with monkeypatch.context() as patch:
        patch.setattr(Admitter, "admit", crash)
        with pytest.raises(RuntimeError, match="reconciler process died"):
            rig.reconcile()

    pending = rig.case_of(task_id)
    assert (pending.admission, pending.state) == (None, CaseState.OPEN)
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.SESSION_LOST
    report = rig.reconcile()
    assert report.admissions == {"reexecute": 1}
    assert rig.case_of(task_id).admission is Admission.REEXECUTE


# -- two reconcilers at once -----------------------------------------------------------------


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` in threads released together; re-raise the first error."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[index] = call()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    if errors:
        raise errors[0]
    return results


def test_two_reconcilers_at_once_open_one_case_and_admit_one_successor_per_task(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    with (
        open_rig(store, clock, tmp_path / "a") as a,
        open_rig(store, clock, tmp_path / "b", namespace=a.sh.settings.redis_namespace) as b,
    ):
        b.ledger = a.ledger
        seeds: dict[str, dict[str, Any]] = {
            "none": {},
            "none-2": {},
            "keyed": {"ops": [{"name": "charge", "key": "k", "policy": "keyed"}]},
            "hold": {"ops": [{"name": "charge"}]},
            "reconcile": {"ops": [{"name": "charge", "outcome": "ok"}], "returned": True},
        }
        seeded = {name: a.interrupted(**seed) for name, seed in seeds.items()}
        live_id, live = a.interrupted()
        a.hold_lease(live)

        for _ in range(3):
            concurrently(a.reconcile, b.reconcile)
            clock.advance(GRACE_SECONDS)

        for name, (task_id, session) in seeded.items():
            [case] = a.cases_of(task_id)
            assert case.interrupted_attempt_id == session.attempt.attempt_id
            assert len(a.events(task_id, EventKind.SESSION_LOST)) == 1, name
            decisions = a.events(task_id, EventKind.ADMISSION)
            assert len(decisions) == 1, (name, [d.data for d in decisions])
        hold_id = seeded["hold"][0]
        assert len(a.events(hold_id, EventKind.HOLD)) == 1
        reconciled_id = seeded["reconcile"][0]
        assert len(a.reports(reconciled_id)) == 1
        assert a.task(reconciled_id).bucket is Bucket.REVIEW
        assert a.cases_of(live_id) == []

        # Two workers receive the successor's message at once: one claims it.
        charging_agent(a)
        charging_agent(b)
        for name in ("none", "none-2", "keyed"):
            task_id = seeded[name][0]
            outcomes = concurrently(
                partial(a.sh.run_session, task_id), partial(b.sh.run_session, task_id)
            )
            # The keyed successor was admitted to repeat the seeded "charge" {"n": 0} under
            # key k; this agent charges other args and returns with that intent still open:
            # not settled (effect_left_open), held. One claims either way.
            ended = "failed" if name == "keyed" else "settled"
            assert sorted(o.outcome for o in outcomes) == sorted([ended, "not_claimed"]), name
            assert [x.number for x in a.attempts(task_id)] == [1, 2]
            assert a.cases_of(task_id)[0].successor_attempt_id == a.attempts(task_id)[1].attempt_id
            assert len(a.ledger.of(task_id)) == 1


def test_many_concurrent_passes_over_many_lost_sessions_converge(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    with (
        open_rig(store, clock, tmp_path / "a") as a,
        open_rig(store, clock, tmp_path / "b", namespace=a.sh.settings.redis_namespace) as b,
        open_rig(store, clock, tmp_path / "c", namespace=a.sh.settings.redis_namespace) as c,
    ):
        seeded = [a.interrupted(ops=[{"name": "charge"}] if n % 2 else []) for n in range(12)]
        concurrently(a.reconcile, b.reconcile, c.reconcile)
        clock.advance(GRACE_SECONDS)
        reports: list[PassReport] = concurrently(a.reconcile, b.reconcile, c.reconcile)
        assert sum(r.lost for r in reports) == len(seeded)
        with store.snapshot() as connection:
            assert case_rows.count(connection) == len(seeded)
        for task_id, _ in seeded:
            assert len(a.events(task_id, EventKind.ADMISSION)) == 1


# -- publishing ------------------------------------------------------------------------------


def test_each_pass_republishes_an_admitted_successor_until_it_is_claimed(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    published: list[str] = []
    with open_rig(store, clock, tmp_path, publisher=lambda t: published.append(t.task_id)) as r:
        task_id, _ = r.interrupted()
        held_id, _ = r.interrupted(ops=[{"name": "charge"}])
        published.clear()
        r.lose(task_id)
        assert published == [task_id]  # the admitting pass published the successor
        assert r.reconcile().republished == 1  # a lost message is published again
        charging_agent(r)
        assert r.sh.run_session(task_id).outcome == "settled"
        assert r.reconcile().republished == 0
        assert published == [task_id, task_id]
        assert held_id not in published
        # A committed TASK never published (e.g. the broker was down) is swept up.
        inbox_id = r.new_task()
        assert inbox_id in published
        published.clear()
        with r.store.transaction() as connection:
            from surehand.store import task_moves

            task_moves.update_if(
                connection,
                inbox_id,
                expect={"bucket": "inbox"},
                values={"published": False},
                now=clock.now(),
            )
        assert r.reconcile().republished == 1
        assert published == [inbox_id]


# -- the loop and the CLI --------------------------------------------------------------------


def test_the_loop_wakes_when_a_suspects_grace_runs_out_and_survives_a_failed_pass() -> None:
    stop = threading.Event()
    passes: list[float] = []

    class Scripted:
        def run_once(self) -> PassReport:
            passes.append(time.monotonic())
            if len(passes) == 2:
                raise RuntimeError("database restarting")
            if len(passes) == 4:
                stop.set()
            return PassReport(next_due_seconds=0.01)

    started = time.monotonic()
    thread = threading.Thread(target=reconcile_loop, args=(cast(Reconciler, Scripted()), stop, 0.1))
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert len(passes) == 4
    # Waits: due (>= 0.05 floor), interval after the failure, due: far below 4 intervals.
    assert passes[-1] - started < 1.0


def test_reconcile_once_from_the_cli_prints_the_pass(rig: Rig) -> None:
    rig.interrupted()
    result = CliRunner().invoke(
        app,
        ["reconcile", "--once", "--embedded", "--json", "--database-url", rig.store.url],
        env={"SUREHAND_REDIS_NAMESPACE": rig.sh.settings.redis_namespace},
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["running"], report["suspected"], report["lost"]) == (1, 1, 0)
    assert report["redis_ok"] is True


def test_a_generation_marker_minted_for_the_first_time_is_not_a_restart(rig: Rig) -> None:
    rig.interrupted()
    rig.reconcile()  # no marker yet: no session has started on this Redis
    rig.leases.ensure_generation()
    rig.clock.advance(GRACE_SECONDS)
    assert rig.reconcile().lost == 1


def test_a_redis_failure_in_the_middle_of_a_scan_judges_nothing(
    outage_rig: tuple[Rig, SwitchableLeases], monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, leases = outage_rig
    monkeypatch.setattr(reconciler_module, "PAGE", 1)  # one attempt per page
    seeded = [rig.interrupted() for _ in range(3)]
    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS * 3)
    real_holders = leases.holders
    calls: list[int] = []

    def flaky(task_ids: Sequence[str]) -> dict[str, str | None]:
        calls.append(1)
        if len(calls) == 2:
            raise LeaseUnavailable("test: Redis went away mid-scan")
        return real_holders(task_ids)

    monkeypatch.setattr(leases, "holders", flaky)
    report = rig.reconcile()

    assert (report.redis_ok, report.lost) == (False, 0)
    assert all(rig.cases_of(task_id) == [] for task_id, _ in seeded)
    report = rig.reconcile()  # Redis answers again: the grace restarts from now
    assert (report.suspected, report.lost) == (3, 0)
    rig.clock.advance(GRACE_SECONDS)
    assert rig.reconcile().lost == 3


def test_a_pass_never_asks_for_a_connection_while_it_holds_one(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    """The scan's suspicions are written after its read is closed: a holder waiting for a
    second connection deadlocks a bounded pool once every connection is held that way (here a
    pool of one, which a nested checkout would wait out and fail)."""
    with open_rig(
        store, clock, tmp_path, database_pool_size=1, database_pool_timeout_seconds=5.0
    ) as small:
        task_id, session = small.interrupted()
        with watch_pools(small.store) as watch:
            report = small.reconcile()
            assert (report.suspected, report.lost) == (1, 0)
            small.clock.advance(GRACE_SECONDS)
            report = small.reconcile()
        assert report.lost == 1
        assert missing_since(small, session) is not None
        assert watch.nested == []
        assert small.cases_of(task_id) != []
