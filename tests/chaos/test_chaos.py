"""Chaos: real ``surehand worker`` processes killed with SIGKILL, paused with SIGSTOP, and a
Redis restarted under a live session; the reconciler runs in the test process.

Each test gets a private ``redis-server`` (the Celery broker and, unless stated, the leases) and
a store (Postgres; SQLite files too where cheap). Workers load ``tests.chaos_agents``, whose
effects append to a file the test reads, so effects are counted outside surehand's records. The
worker kills itself at a named crash point (``SUREHAND_CRASH_AT``); a second worker, started
without one, runs any successor. Settings are scaled down:

    lease TTL 1 s, heartbeat 0.3 s, lost grace 0.5 s, reconcile interval 0.5 s

Every kill test asserts the kill was detected (the attempt ended ``SESSION_LOST``, once), by a
bounded wait that names what it waited for; how long detection takes is measured, not asserted
here, by ``bench/sessions/reconcile.py`` (detection latency, kill -> ``SESSION_LOST``). A "nothing
happened" check waits for a number of reconciler passes, counted, not for a stretch of time.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from surehand.model import (
    Admission,
    AttemptState,
    Bucket,
    CaseState,
    EffectFact,
    EventKind,
    Operation,
)
from surehand.store import Store
from tests.chaos_agents import SLEEP_ENV
from tests.shared.chaos import HEARTBEAT, Chaos, open_chaos, postgres_only

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def assert_detected(chaos: Chaos, task_id: str) -> None:
    """The killed session's attempt ended ``SESSION_LOST``, after everything it wrote, once."""
    lost = chaos.attempts(task_id)[0]
    assert lost.state is AttemptState.SESSION_LOST, lost
    assert lost.ended_at is not None
    assert lost.ended_at >= lost.started_at
    assert len(chaos.events(task_id, EventKind.SESSION_LOST)) == 1


# -- kill before any operation intent -> none_verified -> reexecute ------------------------


def test_kill_before_any_intent_reexecutes_the_same_task_once_with_two_reconcilers(
    chaos: Chaos,
) -> None:
    """Crash point ``session.after_claim``; two reconcilers race (one case, one successor)."""
    doomed = chaos.worker("one_effect", crash_at="session.after_claim")
    chaos.reconcile_in_background(chaos.sh, chaos.handle())
    task_id = chaos.submit()
    chaos.wait_dead(doomed)

    case = chaos.decided(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert_detected(chaos, task_id)
    assert chaos.effects(task_id) == []

    chaos.worker("one_effect")
    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the successor to settle")

    first, second = chaos.attempts(task_id)
    assert (first.state, second.state) == (AttemptState.SESSION_LOST, AttemptState.SUCCEEDED)
    assert second.number == 2
    assert second.case_id == case.case_id
    [resolved] = chaos.cases(task_id)
    assert resolved.state is CaseState.RESOLVED
    assert resolved.successor_attempt_id == second.attempt_id
    assert [e["attempt"] for e in chaos.effects(task_id)] == [2]
    assert chaos.task_count() == 1
    assert len(chaos.events(task_id, EventKind.SESSION_LOST)) == 1
    assert len(chaos.events(task_id, EventKind.ADMISSION)) == 1


# -- RA-7: the agent returned, the REPORT was not written -> reconcile_only ------------------


@postgres_only
def test_kill_after_the_agent_returned_reconciles_the_report_without_repeating_the_effect(
    chaos: Chaos,
) -> None:
    """Crash point ``session.after_return``: the outcome and the agent's return are recorded,
    the REPORT is not (the seed's RA-7, effect confirmed)."""
    doomed = chaos.worker("one_effect", crash_at="session.after_return")
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait_dead(doomed)

    case = chaos.decided(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert case.state is CaseState.RESOLVED
    assert_detected(chaos, task_id)
    task = chaos.task(task_id)
    assert (task.bucket, task.hold) == (Bucket.REVIEW, None)
    [report] = chaos.sh.reports(task_id)
    assert "Reconciled from records" in report.body
    assert f"appended once for {task_id} in attempt 1" in report.body  # the agent's result
    assert [a.state for a in chaos.attempts(task_id)] == [AttemptState.SESSION_LOST]
    assert [e["attempt"] for e in chaos.effects(task_id)] == [1]
    assert chaos.queued() == 0  # nothing was dispatched to run it again


# -- RA-8: open intent, no key or probe -> hold; review decides ------------------------------


@postgres_only
def test_kill_with_an_open_intent_holds_and_a_review_of_absent_runs_the_effect_once(
    chaos: Chaos,
) -> None:
    """Crash point ``operation.after_intent``: the intent is committed, the effect never ran,
    and nothing says so (the seed's RA-8). Hold; nothing re-runs; PM reviews ``absent``."""
    doomed = chaos.worker("one_effect", crash_at="operation.after_intent")
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait_dead(doomed)
    chaos.worker("one_effect")  # idle and ready: nothing may reach it while the TASK is held

    case = chaos.decided(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert_detected(chaos, task_id)
    task = chaos.task(task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.hold is not None
    assert task.hold.case_id == case.case_id
    chaos.wait_passes(3)
    assert len(chaos.attempts(task_id)) == 1
    assert chaos.effects(task_id) == []
    assert chaos.queued() == 0

    decided = chaos.sh.review(case.case_id, effect="absent", note="no append seen", actor="PM")

    assert decided.admission is Admission.REEXECUTE
    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the successor to settle")
    assert [e["attempt"] for e in chaos.effects(task_id)] == [2]
    assert [a.state for a in chaos.attempts(task_id)] == [
        AttemptState.SESSION_LOST,
        AttemptState.SUCCEEDED,
    ]


@postgres_only
def test_kill_after_an_unkeyed_effect_holds_and_a_review_of_present_reconciles(
    chaos: Chaos,
) -> None:
    """Crash point ``operation.after_effect``: the effect happened, its outcome was never
    recorded. Hold; PM reviews ``present``; the REPORT is reconciled and nothing re-runs."""
    doomed = chaos.worker("one_effect", crash_at="operation.after_effect")
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait_dead(doomed)
    chaos.worker("one_effect")

    case = chaos.decided(task_id)
    assert case.admission is Admission.HOLD_FOR_REVIEW
    assert_detected(chaos, task_id)
    assert [e["attempt"] for e in chaos.effects(task_id)] == [1]

    decided = chaos.sh.review(
        case.case_id, effect="present", note="the append is in the log", actor="PM"
    )

    assert (decided.effect_fact, decided.admission) == (
        EffectFact.CONFIRMED,
        Admission.RECONCILE_ONLY,
    )
    task = chaos.task(task_id)
    assert (task.bucket, task.hold) == (Bucket.REVIEW, None)
    [report] = chaos.sh.reports(task_id)
    assert "Review: effect present — the append is in the log" in report.body
    chaos.wait_passes(2)
    assert [e["attempt"] for e in chaos.effects(task_id)] == [1]
    assert len(chaos.attempts(task_id)) == 1
    assert chaos.queued() == 0


# -- open intent with an idempotency key -> single_verified ----------------------------------


@postgres_only
def test_kill_with_an_open_keyed_intent_repeats_it_once_with_the_same_key(chaos: Chaos) -> None:
    """Crash point ``operation.after_effect`` with a keyed effect: the successor repeats it
    exactly once, with the recorded key (a keyed receiver deduplicates the pair)."""
    doomed = chaos.worker("keyed_effect", crash_at="operation.after_effect")
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait_dead(doomed)
    chaos.worker("keyed_effect")

    case = chaos.decided(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.SINGLE_VERIFIED, Admission.REEXECUTE)
    assert_detected(chaos, task_id)
    [intent] = chaos.operations(task_id)
    assert case.bound_operation_id == intent.operation_id
    recorded_key = case.effect_refs["idempotency_key"]
    assert recorded_key == intent.idempotency_key == f"{task_id}:charge"

    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the successor to settle")

    effects = chaos.effects(task_id)
    assert [(e["attempt"], e["key"]) for e in effects] == [(1, recorded_key), (2, recorded_key)]
    assert len({e["key"] for e in effects}) == 1
    [settled] = chaos.operations(task_id)  # the same operation, repeated and settled
    assert settled.operation_id == intent.operation_id
    assert settled.epoch == 2


# -- open intent with a probe -> the probe decides -------------------------------------------


@postgres_only
@pytest.mark.parametrize(
    ("crash_at", "admission", "attempts"),
    [
        ("operation.after_effect", Admission.RECONCILE_ONLY, [1]),
        ("operation.after_intent", Admission.REEXECUTE, [2]),
    ],
    ids=["effect-present", "effect-absent"],
)
def test_kill_with_a_probed_intent_lets_the_probe_decide(
    chaos: Chaos, crash_at: str, admission: Admission, attempts: list[int]
) -> None:
    asked: list[int] = []

    @chaos.sh.probe("chaos_ledger")
    def ledger(operation: Operation) -> bool:
        asked.append(operation.operation_id)
        return any(e["name"] == "charge" for e in chaos.effects(operation.task_id))

    doomed = chaos.worker("probed_effect", crash_at=crash_at)
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait_dead(doomed)
    chaos.worker("probed_effect")

    case = chaos.decided(task_id)

    assert case.admission is admission
    assert len(asked) == 1
    assert_detected(chaos, task_id)
    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the TASK to reach review")
    assert [e["attempt"] for e in chaos.effects(task_id)] == attempts
    assert len(chaos.attempts(task_id)) == max(attempts)


# -- the old owner wakes up after its successor started --------------------------------------


@postgres_only
def test_a_paused_owner_that_wakes_after_its_successor_settled_is_fenced_and_recorded(
    chaos: Chaos,
) -> None:
    """SIGSTOP the worker mid-session past its lease TTL, let the successor run on another
    worker, then SIGCONT: the old session's write is fenced and recorded, nothing changes.

    Its heartbeat is frozen too (no renewal falls due in the test), as in a process whose
    renewals stalled: on SIGCONT nothing in the process knows the lease is gone, so the agent
    goes straight into its write and only the store's fence stops it. (With a live heartbeat
    the renewal may fail first and the session refuses the write itself, with ``LeaseLost``:
    that path has its own tests.)"""
    frozen = {SLEEP_ENV: "1.0", "SUREHAND_HEARTBEAT_SECONDS": "600"}
    owner = chaos.worker("paused_owner", **frozen)
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    started = chaos.markers / f"{task_id}-started-1"
    chaos.wait(started.exists, "attempt 1 to start")
    os.killpg(owner.process.pid, signal.SIGSTOP)

    case = chaos.decided(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert_detected(chaos, task_id)
    chaos.worker("paused_owner")
    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the successor to settle")
    settled_case = chaos.cases(task_id)[0]
    settled_task = chaos.task(task_id)

    os.killpg(owner.process.pid, signal.SIGCONT)
    chaos.wait(
        lambda: bool(chaos.events(task_id, EventKind.STALE_OWNER_FENCED)),
        "the old owner's write to be fenced",
    )

    [fenced] = chaos.events(task_id, EventKind.STALE_OWNER_FENCED)
    first, second = chaos.attempts(task_id)
    assert (fenced.attempt_id, fenced.epoch) == (first.attempt_id, 1)
    assert fenced.data["write"] == "operation_intent:append"
    assert fenced.data["current_epoch"] == 2
    assert (first.state, second.state) == (AttemptState.SESSION_LOST, AttemptState.SUCCEEDED)
    assert chaos.cases(task_id) == [settled_case]  # the disposition is untouched
    assert chaos.task(task_id) == settled_task
    assert [e["attempt"] for e in chaos.effects(task_id)] == [2]
    assert owner.returncode is None  # it carried on, refused, without dying


@postgres_only
def test_a_cut_off_owner_that_knows_its_lease_is_lost_still_submits_its_end_and_is_fenced(
    chaos: Chaos,
) -> None:
    """A partition, process-level: SIGSTOP the worker past its lease TTL with its heartbeat
    live, let the successor settle on another worker, SIGCONT. The old heartbeat finds the
    lease gone and stops the agent, whose effect is refused; the session then submits the end
    of its attempt with its old epoch, and the store fences it and records the fenced write
    (the evidence of a late owner). Nothing else changes; the effect ran once."""
    owner = chaos.worker("partitioned_owner")
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait((chaos.markers / f"{task_id}-started-1").exists, "attempt 1 to start")
    os.killpg(owner.process.pid, signal.SIGSTOP)

    case = chaos.decided(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert_detected(chaos, task_id)
    chaos.worker("partitioned_owner")
    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the successor to settle")
    settled_case, settled_task = chaos.cases(task_id)[0], chaos.task(task_id)

    os.killpg(owner.process.pid, signal.SIGCONT)
    chaos.wait(
        lambda: bool(chaos.events(task_id, EventKind.STALE_OWNER_FENCED)),
        "the old owner's end of attempt to be fenced",
    )

    [fenced] = chaos.events(task_id, EventKind.STALE_OWNER_FENCED)
    first, second = chaos.attempts(task_id)
    assert (fenced.attempt_id, fenced.epoch) == (first.attempt_id, 1)
    assert (fenced.data["write"], fenced.data["current_epoch"]) == ("interrupt", 2)
    assert (chaos.markers / f"{task_id}-refused-1").exists()  # its agent was stopped
    assert (first.state, second.state) == (AttemptState.SESSION_LOST, AttemptState.SUCCEEDED)
    assert chaos.cases(task_id) == [settled_case]
    assert chaos.task(task_id) == settled_task
    assert [e["attempt"] for e in chaos.effects(task_id)] == [2]
    assert owner.returncode is None


# -- Redis restarted under a live session ----------------------------------------------------


@postgres_only
def test_a_redis_restart_under_a_live_session_is_not_a_loss(store: Store, tmp_path: Path) -> None:
    """The lease Redis (private, no persistence) restarts while the agent works for ten
    heartbeats: the heartbeat puts the lease back, the reconciler does not count the outage,
    and the session completes with one effect."""
    with open_chaos(store, tmp_path, separate_lease_redis=True) as chaos:
        worker = chaos.worker("slow_effect", **{SLEEP_ENV: str(10 * HEARTBEAT)})
        chaos.reconcile_in_background()
        task_id = chaos.submit()
        working = chaos.markers / f"{task_id}-working-1"
        chaos.wait(working.exists, "the session to be working")

        chaos.lease_redis.restart()

        chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the session to settle")
        [attempt] = chaos.attempts(task_id)
        assert attempt.state is AttemptState.SUCCEEDED
        assert chaos.events(task_id, EventKind.SESSION_LOST) == []
        assert chaos.cases(task_id) == []
        assert [e["attempt"] for e in chaos.effects(task_id)] == [1]
        assert "re-acquired" in worker.output()  # the heartbeat restored the lease
