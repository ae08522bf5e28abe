"""The session runner in-process: claim -> lease -> heartbeat -> agent -> record return ->
settle, and every way a session ends without settling (agent exception, lost lease, a
successor that took over, a lease held by someone else)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from celery.exceptions import Retry

from surehand.agents.context import SessionContext
from surehand.dispatcher import claims, late_writes
from surehand.dispatcher import runner as runner_module
from surehand.dispatcher.recovery import loss_grace
from surehand.dispatcher.session_exits import SessionOutcome
from surehand.dispatcher.sessions import MAX_REFUSED_LATE, Session
from surehand.dispatcher.worker import CLAIM_RETRY_SECONDS
from surehand.errors import LeaseLost, StoreUnavailable
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    AttemptCause,
    AttemptState,
    Bucket,
    EventKind,
    OperationState,
    ReportStatus,
)
from surehand.queue.celery_app import SESSION_TASK_NAME
from surehand.testing import ManualClock
from tests.procs import wait_until
from tests.session_helpers import (
    Harness,
    attempts_of,
    claimed,
    committed_task,
    events_of,
    operations_of,
    read_task,
    reports_of,
    rows_of,
)

Agent = Callable[[SessionContext], Any]
REAL_INTERRUPT = Session.interrupt


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def with_agent(sh: Surehand, agent: Agent, *, review: bool = True) -> Surehand:
    sh.registry.register("DEV", agent, review=review)
    return sh


def finished(sh: Surehand, task_id: str) -> list[str]:
    return [e.data["state"] for e in events_of(sh.store, task_id, EventKind.ATTEMPT_FINISHED)]


# -- settling --------------------------------------------------------------------------------


def test_a_session_settles_in_review_with_the_agent_result_as_its_report(
    harness: Harness,
) -> None:
    def agent(ctx: SessionContext) -> str:
        ctx.operation("open_pr", {"branch": "fix"}, lambda: "PR #12")
        return "Opened PR #12"

    sh = with_agent(harness.surehand(), agent)
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome == SessionOutcome(task_id, "settled", 1, "review")
    task = read_task(sh.store, task_id)
    assert (task.bucket, task.epoch) == (Bucket.REVIEW, 1)
    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.state is AttemptState.SUCCEEDED
    assert (attempt.agent_returned, attempt.result) == (True, "Opened PR #12")
    [report] = reports_of(sh.store, task_id)
    assert (report.body, report.reporter, report.recipient) == ("Opened PR #12", "DEV", "PM")
    assert (report.status, report.attempt_id) == (ReportStatus.DONE, attempt.attempt_id)
    [op] = operations_of(sh.store, task_id)
    assert (op.name, op.state, op.outcome) == (
        "open_pr",
        OperationState.SUCCEEDED,
        {"value": "PR #12"},
    )
    assert finished(sh, task_id) == ["succeeded"]
    assert sh.leases.holder(task_id) is None  # released with compare-and-delete


def test_an_agent_registered_without_review_settles_in_done(harness: Harness) -> None:
    sh = with_agent(harness.surehand(), lambda ctx: "done already", review=False)
    task_id = committed_task(sh)

    assert sh.run_session(task_id).bucket == "done"
    assert read_task(sh.store, task_id).bucket is Bucket.DONE


def test_a_structured_result_becomes_a_json_report(harness: Harness) -> None:
    sh = with_agent(harness.surehand(), lambda ctx: {"files": 2, "ok": True})
    task_id = committed_task(sh)

    sh.run_session(task_id)

    [report] = reports_of(sh.store, task_id)
    assert report.body == '{\n  "files": 2,\n  "ok": true\n}'


def test_a_progress_report_from_the_agent_stays_beside_the_final_report_that_submit_cites(
    harness: Harness,
) -> None:
    def agent(ctx: SessionContext) -> str:
        ctx.report("cloning the repo", ReportStatus.IN_PROGRESS)
        return "all tests pass"

    sh = with_agent(harness.surehand(), agent)
    task_id = committed_task(sh)

    sh.run_session(task_id)

    progress, final = reports_of(sh.store, task_id)
    assert (progress.status, progress.body) == (ReportStatus.IN_PROGRESS, "cloning the repo")
    assert (final.status, final.body) == (ReportStatus.DONE, "all tests pass")
    submit = events_of(sh.store, task_id, EventKind.TRANSITION)[-1]
    assert (submit.action, submit.data["report_id"]) == ("submit", final.report_id)


def test_the_heartbeat_keeps_a_session_longer_than_its_ttl_leased(harness: Harness) -> None:
    held: list[str | None] = []

    def agent(ctx: SessionContext) -> str:
        for _ in range(4):
            ctx.wait_cancelled(0.3)  # 1.2 s in all: longer than the 1 s TTL
            held.append(sh.leases.holder(ctx.task.task_id))
        return "long work"

    sh = with_agent(harness.surehand(lease_ttl_seconds=1.0, heartbeat_seconds=0.1), agent)
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    attempt_id = attempts_of(sh.store, task_id)[0].attempt_id
    assert held == [attempt_id] * 4
    assert outcome.outcome == "settled"


def test_a_duplicate_run_of_a_settled_task_does_not_run_the_agent(harness: Harness) -> None:
    runs: list[int] = []
    sh = with_agent(harness.surehand(), lambda ctx: runs.append(1))
    task_id = committed_task(sh)

    first, second = sh.run_session(task_id), sh.run_session(task_id)

    assert (first.outcome, second.outcome) == ("settled", "not_claimed")
    assert runs == [1]
    assert len(events_of(sh.store, task_id, EventKind.CLAIM_REFUSED)) == 1


# -- failing ---------------------------------------------------------------------------------


def test_an_agent_exception_fails_the_attempt_which_is_held_when_its_role_allows_one_attempt(
    harness: Harness,
) -> None:
    runs: list[int] = []

    def agent(ctx: SessionContext) -> str:
        runs.append(ctx.attempt.number)
        raise ValueError("the spec is contradictory")

    sh = with_agent(harness.surehand(retry_max_attempts="DEV=1"), agent)
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)
    again = sh.run_session(task_id)
    sh.reconcile()

    assert (outcome.outcome, outcome.error) == ("failed", "ValueError: the spec is contradictory")
    assert again.outcome == "not_claimed"
    assert runs == [1]
    [attempt] = attempts_of(sh.store, task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.FAILED, AttemptCause.AGENT_FAILED)
    assert attempt.error == "ValueError: the spec is contradictory"
    assert attempt.agent_returned is False
    # Visible, and no TASK sits in active without a running attempt, an open case or a hold:
    # the failure opened one case, and admission held it for the approver.
    [case] = sh.cases()
    assert (case.interrupted_attempt_id, case.admission) == (
        attempt.attempt_id,
        Admission.HOLD_FOR_REVIEW,
    )
    task = read_task(sh.store, task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.hold is not None
    assert task.hold.case_id == case.case_id
    assert reports_of(sh.store, task_id) == []
    assert finished(sh, task_id) == ["failed"]
    assert sh.leases.holder(task_id) is None


def test_an_operation_failure_the_agent_lets_through_fails_the_attempt(
    harness: Harness,
) -> None:
    def agent(ctx: SessionContext) -> str:
        ctx.operation("push", {"remote": "origin"}, _raise_timeout)
        return "pushed"

    sh = with_agent(harness.surehand(), agent)
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "failed"
    assert "OperationFailed" in (attempts_of(sh.store, task_id)[0].error or "")
    [op] = operations_of(sh.store, task_id)
    assert (op.state, op.error) == (OperationState.FAILED, "TimeoutError: remote hung up")
    assert read_task(sh.store, task_id).bucket is Bucket.ACTIVE


def _raise_timeout() -> None:
    raise TimeoutError("remote hung up")


def test_a_task_whose_role_has_no_agent_fails_its_attempt(harness: Harness) -> None:
    sh = harness.surehand()
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "failed"
    assert "NoAgentForRole" in (outcome.error or "")
    assert attempts_of(sh.store, task_id)[0].state is AttemptState.FAILED


def test_a_lease_held_by_another_attempt_rolls_the_claim_back_without_running_the_agent(
    harness: Harness,
) -> None:
    runs: list[int] = []
    sh = with_agent(harness.surehand(lease_ttl_seconds=0.3), lambda ctx: runs.append(1))
    task_id = committed_task(sh)
    assert sh.leases.acquire(task_id, "someone-else", 60_000)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "lease_busy"
    assert runs == []
    task = read_task(sh.store, task_id)
    assert (task.bucket, task.published) == (Bucket.INBOX, False)
    assert attempts_of(sh.store, task_id)[0].state is AttemptState.FAILED
    assert sh.leases.holder(task_id) == "someone-else"


# -- losing the lease ------------------------------------------------------------------------


def test_a_deleted_lease_stops_the_agent_and_ends_the_attempt_interrupted_never_settled(
    redis_harness: Harness, background: ThreadPoolExecutor
) -> None:
    """No successor owns the TASK yet, so the lost session's end of attempt (fenced by its
    epoch like every write) applies: interrupted by ``lease_lost``, one case for admission."""
    started, saw = threading.Event(), []

    def agent(ctx: SessionContext) -> str:
        started.set()
        saw.append(ctx.wait_cancelled(60))
        saw.append(ctx.cancelled)
        return "this must never become a REPORT"

    sh = with_agent(redis_harness.surehand(), agent)
    task_id = committed_task(sh)
    running: Future[SessionOutcome] = background.submit(sh.run_session, task_id)
    assert started.wait(30)

    assert sh.leases.client.delete(sh.leases.key(task_id)) == 1
    outcome = running.result(timeout=60)

    assert saw == [True, True]
    assert outcome.outcome == "lease_lost"
    task = read_task(sh.store, task_id)
    assert (task.bucket, task.epoch) == (Bucket.ACTIVE, 1)
    [attempt] = attempts_of(sh.store, task_id)
    assert (attempt.state, attempt.cause, attempt.agent_returned) == (
        AttemptState.INTERRUPTED,
        AttemptCause.LEASE_LOST,
        False,  # what it returned after being stopped is never taken as its result
    )
    assert [c.interrupted_attempt_id for c in sh.cases(limit=10)] == [attempt.attempt_id]
    assert reports_of(sh.store, task_id) == []
    assert finished(sh, task_id) == ["interrupted"]
    assert events_of(sh.store, task_id, EventKind.STALE_OWNER_FENCED) == []
    assert sh.leases.holder(task_id) is None  # not put back by the lost session


def test_an_agent_that_ignores_cancellation_cannot_start_another_effect(
    redis_harness: Harness, background: ThreadPoolExecutor
) -> None:
    started, go_on = threading.Event(), threading.Event()
    effects: list[str] = []
    contexts: list[SessionContext] = []
    refusals: list[str] = []

    def agent(ctx: SessionContext) -> str:
        contexts.append(ctx)
        started.set()
        go_on.wait(60)  # never looks at ctx.cancelled
        try:
            ctx.operation("email_customer", {"to": "a@b.c"}, lambda: effects.append("sent"))
        except LeaseLost as refused:
            refusals.append(str(refused))
            raise
        return "sent the email"

    sh = with_agent(redis_harness.surehand(), agent)
    task_id = committed_task(sh)
    running = background.submit(sh.run_session, task_id)
    assert started.wait(30)
    sh.leases.client.delete(sh.leases.key(task_id))
    wait_until(lambda: contexts[0].cancelled, timeout=30, what="the heartbeat to see the loss")
    go_on.set()

    outcome = running.result(timeout=60)

    assert outcome.outcome == "lease_lost"
    assert LeaseLost.__name__ in (outcome.error or "")
    # The words a log search (compose/check's partition scenario) finds the refusal by.
    assert refusals == [
        f"operation 'email_customer' refused: the session of {task_id} lost its lease"
    ]
    assert effects == []
    assert operations_of(sh.store, task_id) == []
    assert reports_of(sh.store, task_id) == []
    assert attempts_of(sh.store, task_id)[0].state is AttemptState.INTERRUPTED


class LossOnCue:
    """A heartbeat that declares the lease lost only when the test says so (``lose()``), as
    the real one does when a paused or cut-off owner's renewal finally runs."""

    renew_failures = 0
    beats: list[LossOnCue] = []

    def __init__(self, *args: Any, on_lost: Callable[[Any], object], **kwargs: Any) -> None:
        self.on_lost = on_lost
        LossOnCue.beats.append(self)

    def start(self) -> None:
        """Never renews."""

    def stop(self) -> None:
        """Nothing to stop."""

    def lose(self) -> None:
        self.on_lost(LeaseLost("lease taken over"))


def _lost_while_a_successor_took_over(
    sh: Surehand, background: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Future[SessionOutcome], list[str]]:
    """Attempt 1 works until told its lease is lost; meanwhile its lease lapses, it is judged
    lost and a successor claims the TASK; then its heartbeat finds the loss. Returns the task,
    the old session's run and the effects its agent ran."""
    monkeypatch.setattr("surehand.dispatcher.runner.Heartbeat", LossOnCue)
    LossOnCue.beats = []
    started = threading.Event()
    effects: list[str] = []

    def agent(ctx: SessionContext) -> str:
        started.set()
        ctx.wait_cancelled(60)
        ctx.operation("deploy", {"env": "prod"}, lambda: effects.append("old owner"))
        return "never settled"

    with_agent(sh, agent)
    task_id = committed_task(sh)
    old_run = background.submit(sh.run_session, task_id)
    assert started.wait(30)
    sh.leases.client.delete(sh.leases.key(task_id))
    [old] = attempts_of(sh.store, task_id)
    sh.recovery.lose(old, state=AttemptState.SESSION_LOST, by="test")
    claimed(sh.services, task_id, worker="successor")
    [beat] = LossOnCue.beats
    beat.lose()
    return task_id, old_run, effects


def test_a_session_that_lost_its_lease_to_a_successor_submits_its_end_and_is_fenced(
    redis_harness: Harness, background: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    sh = redis_harness.surehand()
    task_id, old_run, effects = _lost_while_a_successor_took_over(sh, background, monkeypatch)
    before = rows_of(sh.store, task_id)

    outcome = old_run.result(timeout=60)

    assert (outcome.outcome, outcome.attempt) == ("stale", 1)
    assert effects == []  # its agent was stopped before its effect
    [fenced] = events_of(sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert (fenced.epoch, fenced.data["write"], fenced.data["current_epoch"]) == (
        1,
        "interrupt",
        2,
    )
    # The effect its agent tried after the loss is on record as refused, not only in a log.
    assert fenced.data["refused_after_lease_lost"] == ["operation 'deploy'"]
    assert rows_of(sh.store, task_id) == before


def test_writes_refused_after_a_lost_lease_are_kept_once_each_and_few(harness: Harness) -> None:
    # A hostile agent calling in a loop after the loss must not grow what the attempt's end
    # records (the fenced event's data, the interruption's message).
    sh = harness.surehand()
    session = claimed(sh.services, committed_task(sh))

    for n in range(100):
        session.refuse_late(f"operation 'deploy-{n % 30}'")

    assert session.refused_late == [f"operation 'deploy-{n}'" for n in range(MAX_REFUSED_LATE)]


@pytest.mark.parametrize("reachable_after", [3, None])
def test_a_lost_session_repeats_its_end_while_the_store_is_unreachable_for_a_bounded_time(
    redis_harness: Harness,
    background: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    reachable_after: int | None,
) -> None:
    tries: list[bool] = []

    def unreachable_then_real(self: Session, interrupted: Any, **kwargs: Any) -> None:
        tries.append(kwargs.get("repeat", False))
        if reachable_after is None or len(tries) <= reachable_after:
            raise StoreUnavailable("the worker is cut off from the database")
        REAL_INTERRUPT(self, interrupted, **kwargs)

    monkeypatch.setattr(Session, "interrupt", unreachable_then_real)
    monkeypatch.setattr(late_writes, "LATE_WRITE_MAX_DELAY", 0.01)
    monkeypatch.setattr(late_writes, "LATE_WRITE_MIN_SECONDS", 0.5)
    monkeypatch.setattr(late_writes, "LATE_WRITE_TTLS", 0)
    sh = redis_harness.surehand()
    task_id, old_run, _ = _lost_while_a_successor_took_over(sh, background, monkeypatch)

    outcome = old_run.result(timeout=60)

    fenced = events_of(sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    if reachable_after is not None:  # the network came back within the budget
        assert outcome.outcome == "stale"
        assert tries == [False, True, True, True]  # a repeat first looks for an earlier commit
        assert [event.data["write"] for event in fenced] == ["interrupt"]
    else:  # never reachable: it gives up once the budget is spent, the reconciler decides
        assert outcome.outcome == "lease_lost"
        assert 1 <= len(tries) < 200
        assert fenced == []


class FrozenHeartbeat:
    """A heartbeat that never beats: the owner is paused (GC, SIGSTOP, a slow disk)."""

    renew_failures = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Takes the real Heartbeat's arguments and keeps none of them."""

    def start(self) -> None:
        """Never renews: the lease expires after its TTL, as under a paused owner."""

    def stop(self) -> None:
        """Nothing to stop."""


@pytest.mark.parametrize("late_write", ["operation", "return"])
def test_a_paused_session_resuming_after_its_successor_took_over_is_fenced(
    redis_harness: Harness,
    background: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    late_write: str,
) -> None:
    monkeypatch.setattr("surehand.dispatcher.runner.Heartbeat", FrozenHeartbeat)
    paused, resume = threading.Event(), threading.Event()
    effects: list[str] = []

    def agent(ctx: SessionContext) -> str:
        if ctx.attempt.number == 1:
            paused.set()
            resume.wait(60)
        if late_write == "operation":
            ctx.operation("deploy", {"env": "prod"}, lambda: effects.append("old owner"))
        return f"result of attempt {ctx.attempt.number}"

    sh = with_agent(redis_harness.surehand(lease_ttl_seconds=0.3), agent)
    task_id = committed_task(sh)
    old_run = background.submit(sh.run_session, task_id)
    assert paused.wait(30)
    wait_until(lambda: sh.leases.holder(task_id) is None, timeout=10, what="the lease to expire")
    [old] = attempts_of(sh.store, task_id)
    sh.recovery.lose(old, state=AttemptState.SESSION_LOST, by="test")
    successor = claimed(sh.services, task_id, worker="successor")
    assert sh.leases.acquire(task_id, successor.attempt.attempt_id, 60_000)
    before = rows_of(sh.store, task_id)

    resume.set()
    outcome = old_run.result(timeout=60)

    assert (outcome.outcome, outcome.attempt) == ("stale", 1)
    assert "StaleOwner" in (outcome.error or "")
    assert effects == []
    assert rows_of(sh.store, task_id) == before
    [fenced] = events_of(sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert (fenced.attempt_id, fenced.epoch) == (old.attempt_id, 1)
    expected = "operation_intent:deploy" if late_write == "operation" else "record_return"
    assert fenced.data["write"] == expected
    assert sh.leases.holder(task_id) == successor.attempt.attempt_id  # not released by the old


# -- a store that drops connections under the claim ------------------------------------------


def test_a_claim_the_store_refuses_several_times_is_repeated_and_the_session_runs(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database restart kills every pooled connection: the claim is repeated with the
    session writes' backoff, not once, and the TASK runs without waiting for the sweep."""
    sh = with_agent(harness.surehand(), lambda _ctx: "done")
    task_id = committed_task(sh)
    monkeypatch.setattr("surehand.dispatcher.sessions.STORE_RETRY_DELAYS", (0.0,) * 4)
    real_claim = claims.claim
    refusals = iter(range(3))

    def flaky_claim(*args: Any, **kwargs: Any) -> Any:
        if next(refusals, None) is not None:
            raise StoreUnavailable("server closed the connection unexpectedly")
        return real_claim(*args, **kwargs)

    monkeypatch.setattr(runner_module, "claim", flaky_claim)

    outcome = sh.run_session(task_id)

    assert (outcome.outcome, outcome.attempt) == ("settled", 1)
    assert len(attempts_of(sh.store, task_id)) == 1


def test_a_claim_that_cannot_reach_the_store_publishes_its_message_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message was acked before the claim: when the store stays away past the retries,
    the session task asks Celery to deliver it again instead of dropping it."""
    sh = harness.surehand()
    task_id = committed_task(sh)

    def unreachable(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreUnavailable("the database is unreachable")

    monkeypatch.setattr("surehand.dispatcher.sessions.STORE_RETRY_DELAYS", ())
    monkeypatch.setattr(runner_module, "claim", unreachable)
    session_task = sh.celery.tasks[SESSION_TASK_NAME]
    retried: list[dict[str, Any]] = []

    def retry(**options: Any) -> Retry:
        retried.append(options)
        return Retry("again")

    monkeypatch.setattr(session_task, "retry", retry)

    with pytest.raises(Retry):
        session_task.run(task_id)

    assert retried[0]["countdown"] == CLAIM_RETRY_SECONDS
    assert isinstance(retried[0]["exc"], StoreUnavailable)


def test_a_claim_whose_commit_reply_was_lost_is_judged_lost_and_rerun_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash window the repeated claim opens: the first claim committed but its reply was
    lost. The repeat finds nothing to claim; the attempt that claim made never takes its lease,
    so the reconciler judges it lost after the grace and admits one successor (no effects)."""
    runs: list[int] = []

    def agent(ctx: SessionContext) -> str:
        runs.append(ctx.attempt.number)
        return "done"

    sh = with_agent(harness.surehand(), agent)
    task_id = committed_task(sh)
    monkeypatch.setattr("surehand.dispatcher.sessions.STORE_RETRY_DELAYS", (0.0,))
    real_claim = claims.claim
    replies_lost = iter(range(1))

    def claim_then_lose_the_reply(*args: Any, **kwargs: Any) -> Any:
        claimed_now = real_claim(*args, **kwargs)
        if next(replies_lost, None) is not None:
            raise StoreUnavailable("the reply to the commit was lost")
        return claimed_now

    monkeypatch.setattr(runner_module, "claim", claim_then_lose_the_reply)

    assert sh.run_session(task_id).outcome == "not_claimed"
    sh.reconcile()  # the orphaned attempt's lease is missing: suspected, not yet lost
    clock = harness.clock
    assert isinstance(clock, ManualClock)
    clock.advance(loss_grace(sh.settings).total_seconds() + 1)
    sh.reconcile()
    outcome = sh.run_session(task_id)

    assert (outcome.outcome, outcome.attempt) == ("settled", 2)
    assert runs == [2]
    first, second = attempts_of(sh.store, task_id)
    assert (first.state, second.state) == (AttemptState.SESSION_LOST, AttemptState.SUCCEEDED)
    [case] = sh.cases()
    assert case.admission is Admission.REEXECUTE
