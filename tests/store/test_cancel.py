"""Cancel a TASK, time limits, pause a role: the service layer on both databases.

Sessions run in this process (the rig's runner, leases on fakeredis); their stop watch reads the
store every 50 ms. Real workers and a real process tree: tests/processes/test_cancel_workers.py.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import event

from surehand.agents.context import SessionContext
from surehand.digest import request_digest
from surehand.dispatcher.claims import claim
from surehand.dispatcher.stops import StopWatch, _Watched
from surehand.errors import (
    ConfigError,
    Forbidden,
    IllegalTransition,
    NotAuthorized,
    TaskNotFound,
    ValidationFailed,
)
from surehand.facade import Surehand
from surehand.model import (
    ADMIN,
    Admission,
    AttemptCause,
    AttemptState,
    Bucket,
    EventKind,
    ReportStatus,
    TaskFields,
)
from surehand.principals import Principal
from surehand.requests import parse_task_request
from surehand.store import Store
from surehand.testing import ManualClock
from tests.procs import wait_until
from tests.recovery_helpers import Rig, open_rig
from tests.session_helpers import failing_with_an_open_intent

pytestmark = pytest.mark.rig(stop_check_seconds=0.05)


def as_role(rig: Rig, role: str, tenant: str | None = None) -> Surehand:
    return rig.sh.acting_as(Principal(f"{role.lower()}-token", role, tenant or rig.sh.tenant))


def run_in_thread(rig: Rig, task_id: str) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(rig.sh.run_session(task_id)))
    thread.start()
    return thread, outcome


def started(rig: Rig, task_id: str) -> threading.Event:
    """Registers a DEV agent that signals its start, then waits to be stopped."""
    running = threading.Event()

    def agent(ctx: SessionContext) -> str:
        running.set()
        ctx.wait_cancelled(30)
        return "finished anyway"

    rig.sh.agent("DEV")(agent)
    return running


# -- inbox --------------------------------------------------------------------------------------


def test_a_cancelled_inbox_task_is_archived_and_never_claimed(rig: Rig) -> None:
    task_id = rig.new_task()
    outcome = as_role(rig, "PM").cancel(task_id, reason="no longer needed")
    assert outcome.outcome == "archived"
    assert rig.task(task_id).bucket is Bucket.ARCHIVE
    assert claim(rig.services, task_id, worker="w", message_id=None) is None
    assert rig.attempts(task_id) == []
    requested = rig.events(task_id, EventKind.CANCEL_REQUESTED)
    assert [(e.by, e.reason, e.data["principal"]) for e in requested] == [
        ("PM", "no longer needed", "pm-token")
    ]
    moves = rig.events(task_id, EventKind.TRANSITION)
    assert (moves[-1].action, moves[-1].to_bucket) == ("cancel", Bucket.ARCHIVE)


def test_asking_again_changes_nothing_and_answers_the_first_request(rig: Rig) -> None:
    task_id = rig.new_task()
    rig.sh.cancel(task_id, reason="first")
    again = rig.sh.cancel(task_id, reason="second")
    assert again.repeated
    assert again.task.cancel is not None
    assert again.task.cancel.reason == "first"
    assert len(rig.events(task_id, EventKind.CANCEL_REQUESTED)) == 1


def test_n_claimers_racing_a_cancel_end_in_exactly_one_outcome(rig: Rig) -> None:
    for _ in range(3):
        task_id = rig.new_task()
        barrier = threading.Barrier(9)

        def claimer(n: int, task_id: str = task_id, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return claim(rig.services, task_id, worker=f"w{n}", message_id=None) is not None

        def canceller(task_id: str = task_id, barrier: threading.Barrier = barrier) -> str:
            barrier.wait()
            return rig.sh.cancel(task_id, reason="race").outcome

        with ThreadPoolExecutor(9) as pool:
            claims = [pool.submit(claimer, n) for n in range(8)]
            cancelled = pool.submit(canceller)
            won = sum(future.result() for future in claims)
            answer = cancelled.result()
        task = rig.task(task_id)
        assert task.cancel is not None
        if answer == "archived":  # the cancel won: nothing was ever claimed
            assert (won, task.bucket, rig.attempts(task_id)) == (0, Bucket.ARCHIVE, [])
        else:  # one claim won: its session is the one to stop
            assert (answer, won, task.bucket) == ("stopping", 1, Bucket.ACTIVE)
            assert len(rig.attempts(task_id)) == 1
        assert claim(rig.services, task_id, worker="late", message_id=None) is None


# -- who may ------------------------------------------------------------------------------------


def test_the_sender_an_approver_and_an_admin_may_cancel_and_nobody_else(rig: Rig) -> None:
    for role in ("PM", ADMIN):
        task_id = rig.new_task(sender="PM")
        assert as_role(rig, role).cancel(task_id, reason="ok").outcome == "archived"
    qa_sent = rig.new_task(sender="QA")
    assert as_role(rig, "QA").cancel(qa_sent, reason="mine").outcome == "archived"
    task_id = rig.new_task(sender="PM")
    with pytest.raises(NotAuthorized):
        as_role(rig, "DEV").cancel(task_id, reason="the recipient may not")
    with pytest.raises(NotAuthorized):
        as_role(rig, "QA").cancel(task_id, reason="another role may not")
    with pytest.raises(Forbidden):
        as_role(rig, "QA").cancel(task_id, reason="nor act as PM", actor="PM")
    with pytest.raises(TaskNotFound):
        as_role(rig, ADMIN, tenant="other").cancel(task_id, reason="another tenant's admin")
    with pytest.raises(ValidationFailed, match="reason"):
        rig.sh.cancel(task_id, reason="   ")
    assert rig.task(task_id).cancel is None
    assert rig.events(task_id, EventKind.CANCEL_REQUESTED) == []


def test_a_finished_task_cannot_be_cancelled(rig: Rig) -> None:
    rig.sh.agent("DEV")(lambda ctx: "done")
    task_id = rig.new_task()
    rig.sh.run_session(task_id)
    assert rig.task(task_id).bucket is Bucket.REVIEW
    with pytest.raises(IllegalTransition):
        rig.sh.cancel(task_id, reason="too late")


def test_cancel_is_no_lifecycle_move_of_its_own(rig: Rig) -> None:
    task_id = rig.new_task()
    with pytest.raises(ValidationFailed, match="cancel"):
        rig.sh.transition(task_id, "cancel", actor="PM", reason="bypass")


# -- running sessions ---------------------------------------------------------------------------


def test_a_running_session_is_stopped_and_the_task_archived_with_a_report(rig: Rig) -> None:
    running = started(rig, "DEV")
    task_id = rig.new_task()
    thread, outcome = run_in_thread(rig, task_id)
    assert running.wait(10)
    answer = rig.sh.cancel(task_id, reason="runaway")
    assert answer.outcome == "stopping"
    thread.join(20)
    assert [o.outcome for o in outcome] == ["cancelled"]  # type: ignore[attr-defined]
    [attempt] = rig.attempts(task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.CANCELLED)
    case = rig.case_of(task_id)
    assert case.admission is Admission.RECONCILE_ONLY
    task = rig.task(task_id)
    assert task.bucket is Bucket.ARCHIVE
    assert task.hold is None
    [report] = rig.reports(task_id)
    assert report.status is ReportStatus.ABORTED
    assert "Cancelled by ADMIN" in report.body
    assert "attempt 1: interrupted (cancelled)" in report.body


def test_a_cancel_during_an_unsettled_effect_holds_the_task_for_its_approver(rig: Rig) -> None:
    running = threading.Event()

    def agent(ctx: SessionContext) -> str:
        def effect() -> str:
            running.set()
            ctx.wait_cancelled(30)  # the effect is under way when the cancel comes
            raise ConnectionError("stopped halfway: did the charge go through?")

        return str(ctx.operation("charge", {"account": "acme"}, effect))

    rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    thread, _ = run_in_thread(rig, task_id)
    assert running.wait(10)
    rig.sh.cancel(task_id, reason="stop it")
    thread.join(20)
    task = rig.task(task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.hold is not None
    [attempt] = rig.attempts(task_id)
    assert attempt.cause is AttemptCause.CANCELLED
    # The hold stays; the approver's review decides, and the TASK then ends, never re-run.
    again = rig.sh.cancel(task_id, reason="once more")
    assert again.outcome == "held"
    assert rig.task(task_id).hold is not None
    reviewed = rig.sh.review(task.hold.case_id, effect="absent", note="checked", actor="PM")
    assert reviewed.admission is Admission.RECONCILE_ONLY
    assert rig.task(task_id).bucket is Bucket.ARCHIVE
    assert len(rig.attempts(task_id)) == 1


def test_a_time_limit_stops_a_sleeping_agent_and_holds_it_timed_out(rig: Rig) -> None:
    started(rig, "DEV")
    task_id = rig.new_task(time_limit_seconds=1)
    outcome = rig.sh.run_session(task_id)
    assert outcome.outcome == "timed_out"
    [attempt] = rig.attempts(task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.TIMED_OUT)
    task = rig.task(task_id)
    assert task.hold is not None
    assert "time limit of 1s ran out" in task.hold.reason


def test_a_role_default_time_limit_applies_when_the_task_gives_none(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    with open_rig(
        store, clock, tmp_path, stop_check_seconds=0.05, role_time_limits="QA=30,DEV=1"
    ) as rig:
        started(rig, "DEV")
        task_id = rig.new_task()
        assert rig.sh.run_session(task_id).outcome == "timed_out"


# -- digests ------------------------------------------------------------------------------------

OLD_REQUEST = {"sender": "PM", "recipient": "DEV", "subject": "Ship it", "body": "Now."}
# The write-task-v1 digest of OLD_REQUEST, computed by the code before time limits existed.
OLD_DIGEST = "19e7707b809eadfa5545e5bc7a201305149695fe9dc8b36f7d903246a2dd6225"


def test_a_request_without_a_time_limit_keeps_its_digest_byte_for_byte() -> None:
    fields = parse_task_request(OLD_REQUEST).to_fields()
    assert "time_limit_seconds" not in fields.semantic_dict()
    assert request_digest(fields) == request_digest(
        TaskFields(sender="PM", recipient="DEV", subject="Ship it", body="Now.")
    )
    assert request_digest(fields) == OLD_DIGEST


def test_a_time_limit_is_part_of_the_digest_when_given() -> None:
    limited = parse_task_request({**OLD_REQUEST, "time_limit_seconds": 60}).to_fields()
    assert request_digest(limited) != OLD_DIGEST
    with pytest.raises(ValidationFailed, match="time_limit_seconds"):
        parse_task_request({**OLD_REQUEST, "time_limit_seconds": 0})


def test_the_same_submission_with_another_time_limit_is_a_conflict(rig: Rig) -> None:
    first = rig.sh.write_task({**OLD_REQUEST, "client_submission_id": "s-1"})
    second = rig.sh.write_task(
        {**OLD_REQUEST, "client_submission_id": "s-1", "time_limit_seconds": 5}
    )
    assert second.conflict is not None
    assert second.task_id == first.task_id
    assert rig.sh.get_task(str(first.task_id)).fields.time_limit_seconds is None


# -- pause --------------------------------------------------------------------------------------


def test_a_paused_role_starts_nothing_until_resumed(rig: Rig) -> None:
    rig.sh.agent("DEV")(lambda ctx: "done")
    pause = as_role(rig, "PM").pause_role("DEV", reason="provider down")
    assert (pause.role, pause.paused_by, pause.principal) == ("DEV", "PM", "pm-token")
    task_id = rig.new_task()
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    task = rig.task(task_id)
    assert task.bucket is Bucket.INBOX
    assert not task.published
    assert [p.role for p in rig.sh.paused_roles()] == ["DEV"]
    assert rig.sh.for_tenant("other").paused_roles() == []
    assert rig.sh.resume_role("DEV") == 1
    assert rig.sh.paused_roles() == []
    assert rig.sh.run_session(task_id).outcome == "settled"


def test_only_admin_or_pm_may_pause(rig: Rig) -> None:
    with pytest.raises(NotAuthorized):
        as_role(rig, "DEV").pause_role("DEV", reason="no")
    with pytest.raises(NotAuthorized):
        as_role(rig, "QA").resume_role("DEV")
    assert rig.sh.paused_roles() == []


def test_a_bad_role_time_limits_setting_is_a_config_error_before_any_session(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    for bad in ("DEV=soon", "DEV=0", "dev=10", "DEV=5,DEV=6"):
        with (
            open_rig(store, clock, tmp_path, role_time_limits=bad) as rig,
            pytest.raises(ConfigError, match="SUREHAND_ROLE_TIME_LIMITS"),
        ):
            _ = rig.sh.runner


def test_a_task_between_attempts_is_archived_and_its_admitted_successor_never_claimed(
    rig: Rig,
) -> None:
    task_id, _ = rig.interrupted()  # a session died with nothing recorded
    case = rig.lose(task_id)
    assert case.admission is Admission.REEXECUTE  # a successor is admitted, not yet claimed
    outcome = rig.sh.cancel(task_id, reason="no longer wanted")
    assert (outcome.outcome, outcome.case_id) == ("archived", case.case_id)
    assert claim(rig.services, task_id, worker="successor", message_id=None) is None
    assert len(rig.attempts(task_id)) == 1
    [report] = rig.reports(task_id)
    assert "attempt 1: SESSION_LOST" in report.body


def test_the_stop_watch_reads_the_store_and_its_thread_ends_when_nothing_runs(rig: Rig) -> None:
    watch = StopWatch(rig.services)
    task_id = rig.new_task()
    session = rig.claim(task_id)
    watch.watch(session)
    rig.sh.cancel(task_id, reason="stop")
    wait_until(lambda: session.stop_cause is not None, timeout=10, what="the stop")
    assert session.stop_cause == (AttemptCause.CANCELLED, "the TASK was cancelled")
    assert session.cancelled.is_set()
    watch.forget(session)
    wait_until(lambda: watch._thread is None, timeout=10, what="the idle thread to end")


def test_a_task_sent_back_for_rework_is_archived_at_once_and_never_claimed(rig: Rig) -> None:
    rig.sh.agent("DEV")(lambda ctx: "first try")
    task_id = rig.new_task()
    rig.sh.run_session(task_id)
    rig.sh.transition(task_id, "reject", actor="PM", reason="not good enough")
    outcome = rig.sh.cancel(task_id, reason="we will do it differently")
    assert outcome.outcome == "archived"
    assert claim(rig.services, task_id, worker="w", message_id=None) is None
    reports = rig.reports(task_id)
    assert [r.status for r in reports] == [ReportStatus.DONE, ReportStatus.ABORTED]
    assert "attempt 1: succeeded" in reports[-1].body


def statements_of_one_tick(rig: Rig, sessions: int) -> list[str]:
    """The SQL one stop-watch tick sends (this thread's only) while ``sessions`` run."""
    watched = [_Watched(rig.claim(rig.new_task()), None, None) for _ in range(sessions)]
    sent: list[str] = []
    me = threading.get_ident()

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if threading.get_ident() == me:
            sent.append(statement)

    engine = rig.services.store.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        StopWatch(rig.services).check(watched)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def test_a_stop_watch_tick_is_one_query_however_many_sessions_run(rig: Rig) -> None:
    one = statements_of_one_tick(rig, 1)
    many = statements_of_one_tick(rig, 40)

    assert len(many) == len(one)
    [read] = [s for s in many if "FROM tasks" in s]
    assert "tasks.task_id IN" in read  # by primary key
    assert [s for s in many if "FROM tasks" not in s] == [s for s in one if "FROM tasks" not in s]


def test_cancelling_a_task_held_for_another_reason_releases_nothing_and_it_never_runs_again(
    rig: Rig,
) -> None:
    runs: list[int] = []

    # An open intent: held, never retried.
    agent = failing_with_an_open_intent(runs, "the agent gave up")

    rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    rig.sh.run_session(task_id)
    rig.sh.reconcile()
    held = rig.task(task_id).hold
    assert held is not None

    answer = rig.sh.cancel(task_id, reason="not worth another try")
    rig.sh.reconcile()

    assert answer.outcome == "held"
    task = rig.task(task_id)
    assert task.hold == held  # the hold is the approver's to release
    assert task.bucket is Bucket.ACTIVE
    assert rig.case_of(task_id).admission is Admission.HOLD_FOR_REVIEW
    reviewed = rig.sh.review(held.case_id, effect="absent", note="no charge", actor="PM")
    assert reviewed.admission is Admission.RECONCILE_ONLY
    assert rig.task(task_id).bucket is Bucket.ARCHIVE
    assert runs == [1]


def test_a_session_already_running_when_its_role_is_paused_goes_on_to_its_end(rig: Rig) -> None:
    running, go_on = threading.Event(), threading.Event()

    def agent(ctx: SessionContext) -> str:
        running.set()
        assert go_on.wait(30)
        return "finished while paused"

    rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    thread, outcome = run_in_thread(rig, task_id)
    assert running.wait(10)
    as_role(rig, "PM").pause_role("DEV", reason="bad deploy")
    go_on.set()
    thread.join(20)

    assert [o.outcome for o in outcome] == ["settled"]  # type: ignore[attr-defined]
    assert rig.task(task_id).bucket is Bucket.REVIEW
    assert [p.role for p in rig.sh.paused_roles()] == ["DEV"]


def test_a_cancel_ends_a_scheduled_retry_which_is_never_run(rig: Rig) -> None:
    runs: list[int] = []

    def agent(ctx: SessionContext) -> str:
        runs.append(ctx.attempt.number)
        raise RuntimeError("API Error: 529 overloaded_error")  # nothing declared: retried

    rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    rig.sh.run_session(task_id)
    rig.sh.reconcile()
    case = rig.case_of(task_id)
    assert case.admission is Admission.REEXECUTE
    assert case.retry_at is not None  # a retry is scheduled, not yet due

    outcome = rig.sh.cancel(task_id, reason="the provider is down for the day")
    rig.clock.set(case.retry_at)
    rig.sh.reconcile()

    assert outcome.outcome == "archived"
    assert rig.task(task_id).bucket is Bucket.ARCHIVE
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    assert runs == [1]
