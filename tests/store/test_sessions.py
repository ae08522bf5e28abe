"""Claiming and fencing: a claim is one compare-and-set, and every session write is fenced by
epoch in the store.

The paused-owner tests follow Kleppmann's scenario: the owner's lease expires (its heartbeat is
frozen), the loss is recorded and admitted (``recovery.lose``, no reconciler), a successor takes
epoch 2, and then every late write from the old owner is refused with ``StaleOwner``, leaves a
``stale_owner_fenced`` event naming the stale attempt and changes nothing of the successor's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.errors import StaleOwner
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    AttemptState,
    Bucket,
    EventKind,
    ReportStatus,
    RetryPolicy,
)
from tests.procs import wait_until
from tests.session_helpers import (
    Harness,
    attempts_of,
    claim_in_processes,
    claimed,
    committed_task,
    events_of,
    read_task,
    reports_of,
    rows_of,
)


def refusals(services: Services, task_id: str) -> list[str]:
    return [e.data["why"] for e in events_of(services.store, task_id, EventKind.CLAIM_REFUSED)]


# -- claiming --------------------------------------------------------------------------------


def test_a_claim_starts_attempt_one_and_moves_the_task_to_active(services: Services) -> None:
    task_id = committed_task(services)

    session = claimed(services, task_id, worker="w1")

    task = read_task(services.store, task_id)
    assert (task.bucket, task.epoch) == (Bucket.ACTIVE, 1)
    assert session.attempt.number == 1
    assert session.attempt.state is AttemptState.RUNNING
    assert session.attempt.worker == "w1"
    assert session.attempt.lease_id == session.attempt.attempt_id
    claim_event = events_of(services.store, task_id, EventKind.TRANSITION)[-1]
    assert claim_event.action == "claim"
    assert (claim_event.from_bucket, claim_event.to_bucket) == (Bucket.INBOX, Bucket.ACTIVE)
    assert (claim_event.attempt_id, claim_event.epoch) == (session.attempt.attempt_id, 1)


def test_a_second_claim_of_a_running_task_is_refused_and_recorded(services: Services) -> None:
    task_id = committed_task(services)
    claimed(services, task_id)

    again = claim(services, task_id, worker="w2", message_id="msg-2")

    assert again is None
    assert len(attempts_of(services.store, task_id)) == 1
    [refused] = events_of(services.store, task_id, EventKind.CLAIM_REFUSED)
    assert refused.by == "w2"
    assert refused.data == {
        "message_id": "msg-2",
        "bucket": "active",
        "epoch": 1,
        "why": "NotClaimable",
    }


def test_a_task_that_moved_on_to_review_is_not_claimed_again(services: Services) -> None:
    task_id = committed_task(services)
    claimed(services, task_id).settle("finished", to_review=True)

    assert claim(services, task_id, worker="late", message_id="late-msg") is None
    assert refusals(services, task_id) == ["IllegalTransition"]
    assert read_task(services.store, task_id).bucket is Bucket.REVIEW


def test_claiming_an_unknown_task_does_nothing(services: Services) -> None:
    assert claim(services, "TASK-20260101-999", worker="w", message_id=None) is None


def test_eight_threads_claiming_one_task_make_exactly_one_attempt(services: Services) -> None:
    task_id = committed_task(services)
    barrier = threading.Barrier(8)

    def contend(n: int) -> Session | None:
        barrier.wait()
        return claim(services, task_id, worker=f"t{n}", message_id=f"m{n}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        sessions = list(pool.map(contend, range(8)))

    winners = [s for s in sessions if s is not None]
    assert len(winners) == 1
    assert [a.number for a in attempts_of(services.store, task_id)] == [1]
    assert len(refusals(services, task_id)) == 7
    assert read_task(services.store, task_id).epoch == 1


@pytest.mark.slow
def test_eight_processes_claiming_one_task_make_exactly_one_attempt(services: Services) -> None:
    task_id = committed_task(services)

    results = claim_in_processes(services.store.url, task_id, 8)

    assert Counter(r["won"] for r in results) == {True: 1, False: 7}
    [winner] = [r for r in results if r["won"]]
    assert winner["attempt"] == 1
    [attempt] = attempts_of(services.store, task_id)
    assert attempt.worker == winner["name"]
    refused = events_of(services.store, task_id, EventKind.CLAIM_REFUSED)
    losers = {r["name"] for r in results if not r["won"]}
    assert {e.data["message_id"] for e in refused} == losers
    task = read_task(services.store, task_id)
    assert (task.bucket, task.epoch) == (Bucket.ACTIVE, 1)


# -- successors ------------------------------------------------------------------------------


def lose(sh: Surehand, session: Session) -> Admission | None:
    """Record the attempt as lost (what the reconciler does) and return the admission."""
    case = sh.recovery.lose(session.attempt, state=AttemptState.SESSION_LOST, by="test")
    assert case is not None
    return case.admission


def test_a_lost_attempt_without_operations_admits_one_successor_at_epoch_two(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    task_id = committed_task(sh)
    first = claimed(sh.services, task_id, worker="first")
    assert lose(sh, first) is Admission.REEXECUTE

    successor = claimed(sh.services, task_id, worker="second")
    duplicate = claim(sh.services, task_id, worker="third", message_id="dup")

    assert successor.attempt.number == 2
    assert successor.attempt.case_id is not None
    assert duplicate is None
    assert [a.state for a in attempts_of(sh.store, task_id)] == [
        AttemptState.SESSION_LOST,
        AttemptState.RUNNING,
    ]
    assert read_task(sh.store, task_id).epoch == 2


def test_a_held_task_gets_no_successor_from_a_claim(harness: Harness) -> None:
    sh = harness.surehand()
    task_id = committed_task(sh)
    first = claimed(sh.services, task_id)

    class Crash(BaseException):
        """Stands in for the process dying between the intent and the outcome."""

    def crash() -> None:
        raise Crash

    with pytest.raises(Crash):
        run_operation(
            first,
            "charge_card",
            {"amount": 5},
            crash,
            idempotency_key=None,
            retry_policy=RetryPolicy.NONE,
            probe=None,
        )
    assert lose(sh, first) is Admission.HOLD_FOR_REVIEW

    assert claim(sh.services, task_id, worker="eager", message_id="m") is None
    assert refusals(sh.services, task_id) == ["NotClaimable"]
    assert [a.number for a in attempts_of(sh.store, task_id)] == [1]


# -- the paused owner ------------------------------------------------------------------------


def test_a_paused_owner_is_fenced_on_its_operation_report_and_settle(
    redis_harness: Harness,
) -> None:
    sh = redis_harness.surehand()
    task_id = committed_task(sh)
    old = claimed(sh.services, task_id, worker="paused-owner")
    # The owner takes its lease and then pauses: its heartbeat never renews it.
    assert sh.leases.acquire(task_id, old.attempt.attempt_id, 200)
    wait_until(
        lambda: sh.leases.holder(task_id) is None,
        timeout=10,
        what="the paused owner's lease to expire in Redis",
    )
    assert lose(sh, old) is Admission.REEXECUTE
    successor = claimed(sh.services, task_id, worker="successor")
    assert sh.leases.acquire(task_id, successor.attempt.attempt_id, 30_000)
    sent = run_operation(
        successor,
        "send_mail",
        {"to": "ops"},
        lambda: "sent by the successor",
        idempotency_key=None,
        retry_policy=RetryPolicy.NONE,
        probe=None,
    )
    successor.report("halfway there", ReportStatus.IN_PROGRESS, None)
    before = rows_of(sh.store, task_id)
    effects: list[str] = []

    with pytest.raises(StaleOwner):
        run_operation(
            old,
            "send_mail",
            {"to": "ops"},
            lambda: effects.append("sent by the paused owner"),
            idempotency_key=None,
            retry_policy=RetryPolicy.NONE,
            probe=None,
        )
    with pytest.raises(StaleOwner):
        old.report("late progress", ReportStatus.IN_PROGRESS, None)
    with pytest.raises(StaleOwner):
        old.settle("the paused owner's result", to_review=True)

    assert effects == []
    assert sent == "sent by the successor"
    assert rows_of(sh.store, task_id) == before
    fenced = events_of(sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert [e.data["write"] for e in fenced] == [
        "operation_intent:send_mail",
        "report",
        "record_return",  # a settle's first write: the return
    ]
    assert {(e.attempt_id, e.epoch, e.by) for e in fenced} == {
        (old.attempt.attempt_id, 1, "paused-owner")
    }
    assert {e.data["current_epoch"] for e in fenced} == {2}
    assert sh.leases.holder(task_id) == successor.attempt.attempt_id
    # The successor owns the TASK throughout and settles normally.
    assert successor.settle("the successor's result", to_review=True).bucket is Bucket.REVIEW
    assert [r.body for r in reports_of(sh.store, task_id)][-1] == "the successor's result"


def _operation(session: Session) -> object:
    return run_operation(
        session,
        "noop",
        {},
        lambda: None,
        idempotency_key=None,
        retry_policy=RetryPolicy.NONE,
        probe=None,
    )


STALE_WRITES: dict[str, Callable[[Session], object]] = {
    "operation_intent:noop": _operation,
    "report": lambda s: s.report("late", ReportStatus.DONE, None),
    "record_return": lambda s: s.settle("late", to_review=False),  # a settle's first write
    "fail": lambda s: s.fail(RuntimeError("late")),
    "rollback": lambda s: s.rollback("late"),
}


@pytest.mark.parametrize("write", sorted(STALE_WRITES))
def test_every_session_write_of_a_superseded_attempt_is_fenced(
    harness: Harness, write: str
) -> None:
    sh = harness.surehand()
    task_id = committed_task(sh)
    old = claimed(sh.services, task_id, worker="old")
    lose(sh, old)
    successor = claimed(sh.services, task_id, worker="new")
    before = rows_of(sh.store, task_id)

    with pytest.raises(StaleOwner, match="no longer owns"):
        STALE_WRITES[write](old)

    assert rows_of(sh.store, task_id) == before
    [fenced] = events_of(sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert (fenced.attempt_id, fenced.epoch, fenced.data["write"]) == (
        old.attempt.attempt_id,
        1,
        write,
    )
    assert attempts_of(sh.store, task_id)[1] == successor.attempt


def test_an_ended_attempt_cannot_write_either(services: Services) -> None:
    task_id = committed_task(services)
    session = claimed(services, task_id)
    session.fail(RuntimeError("agent broke"))

    with pytest.raises(StaleOwner):
        session.report("after the end", ReportStatus.DONE, None)
    with pytest.raises(StaleOwner):
        _operation(session)

    assert reports_of(services.store, task_id) == []
    assert len(events_of(services.store, task_id, EventKind.STALE_OWNER_FENCED)) == 2
