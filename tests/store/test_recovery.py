"""Recover requests, holds and reviews, the recovery fence, and late writes of a stale owner.

Seeded states on both databases (leases on fakeredis), driven with a manual clock: a caller's
``recover`` is classified from durable state and routed through admission; a held TASK stays in
``active``, shows its hold everywhere and blocks dispatch until its approver reviews it; a
decision taken on an older revision is refused at claim time and decided again; and whatever
the disposition, the interrupted attempt's late writes are fenced and recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from typer.testing import CliRunner

from surehand.agents.context import SessionContext
from surehand.cli import app
from surehand.dispatcher import admission, dispatch
from surehand.dispatcher.effects import Evidence, evaluate
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.errors import (
    CaseNotFound,
    NotAuthorized,
    RecoveryError,
    StaleOwner,
    TaskHeld,
    ValidationFailed,
)
from surehand.model import (
    Action,
    Admission,
    Attempt,
    AttemptState,
    Bucket,
    CaseState,
    EffectFact,
    EventKind,
    InterruptionCase,
    OperationState,
    ReportStatus,
    RetryPolicy,
    Task,
)
from surehand.store import Store, task_moves
from surehand.testing import ManualClock
from tests.recovery_helpers import CHARGE_ARGS, GRACE_SECONDS, Rig, held_task, open_rig


def charging_agent(rig: Rig, key: str | None = None) -> None:
    def agent(ctx: SessionContext) -> str:
        ctx.operation(
            "charge",
            CHARGE_ARGS,
            lambda: rig.ledger.perform(ctx, "charge", key),
            idempotency_key=key,
            retry_policy=RetryPolicy.KEYED if key else RetryPolicy.NONE,
        )
        return "charged"

    rig.sh.agent("DEV")(agent)
    rig.sh.agent("PM")(agent)


def cli(store: Store, *args: str) -> Any:
    """Run ``surehand ARGS --json`` in-process on the test store; returns the parsed JSON."""
    result = CliRunner().invoke(app, [*args, "--json", "--database-url", store.url])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- recover requests ------------------------------------------------------------------------


def test_recover_while_the_owner_holds_its_lease_is_not_admitted_and_recorded(rig: Rig) -> None:
    task_id, session = rig.interrupted()
    rig.hold_lease(session)
    rig.clock.advance(GRACE_SECONDS * 10)

    outcome = rig.sh.recover(task_id, actor="PM")

    assert outcome.admission is Admission.NOT_ADMITTED
    assert outcome.case is None
    assert "holds a live lease" in outcome.reason
    [event] = rig.events(task_id, EventKind.ADMISSION)
    assert (event.by, event.data["admission"]) == ("PM", "not_admitted")
    assert event.data["reason"] == outcome.reason
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING
    assert rig.cases_of(task_id) == []


def test_recover_from_the_cli_while_the_owner_lives_is_not_admitted(rig: Rig) -> None:
    task_id, session = rig.interrupted()
    rig.hold_lease(session)
    result = CliRunner().invoke(
        app,
        ["recover", task_id, "--actor", "PM", "--json", "--database-url", rig.store.url],
        env={"SUREHAND_REDIS_NAMESPACE": rig.sh.settings.redis_namespace},
    )
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)
    assert (outcome["admission"], outcome["case"]) == ("not_admitted", None)
    assert "holds a live lease" in outcome["reason"]
    [event] = rig.events(task_id, EventKind.ADMISSION)
    assert event.data["admission"] == "not_admitted"
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING


def test_recover_within_the_grace_window_waits_for_the_reconciler(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    """The grace is the reconciler's, never less than 1.5 heartbeats (here 15 s, not 0.5 s)."""
    with open_rig(store, clock, tmp_path, heartbeat_seconds=10.0, lost_grace_seconds=0.5) as r:
        task_id, session = r.interrupted()
        r.reconcile()  # suspected now
        r.clock.advance(14)

        outcome = r.sh.recover(task_id, actor="PM")

        assert outcome.admission is Admission.NOT_ADMITTED
        assert "less than the grace window" in outcome.reason
        assert r.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING

        r.clock.advance(1)
        outcome = r.sh.recover(task_id, actor="PM")
        assert (outcome.admission, outcome.reason) == (Admission.REEXECUTE, "lost")
        assert outcome.case is not None
        assert outcome.case.decided_by == "PM"
        assert r.attempt(session.attempt.attempt_id).state is AttemptState.SESSION_LOST


def test_recover_after_a_loss_returns_the_same_case_and_never_opens_a_second(rig: Rig) -> None:
    task_id, _ = rig.interrupted()
    case = rig.lose(task_id)

    first = rig.sh.recover(task_id, actor="PM")
    second = rig.sh.recover(task_id, actor="ADMIN")

    assert first.case is not None
    assert second.case is not None
    assert first.case.case_id == second.case.case_id == case.case_id
    assert second.admission is Admission.REEXECUTE
    assert len(rig.cases_of(task_id)) == 1


def test_recover_of_an_attempt_whose_agent_raised_goes_through_admission(rig: Rig) -> None:
    """An agent failure its role does not retry is held for its approver (never retried
    blindly, DESIGN.md section 5): a recover request finds the held case, and the approver's
    review releases it."""
    task_id = rig.new_task()

    def broken(ctx: SessionContext) -> str:
        raise RuntimeError("model quota exceeded")

    # Its effects unobserved (like a Codex agent without hooks): its role makes one attempt.
    broken.effects_observed = None  # type: ignore[attr-defined]
    rig.sh.agent("DEV")(broken)
    assert rig.sh.run_session(task_id).outcome == "failed"
    assert rig.task(task_id).bucket is Bucket.ACTIVE
    charging_agent(rig)

    outcome = rig.sh.recover(task_id, actor="PM")

    assert outcome.case is not None
    assert (outcome.case.effect_fact, outcome.admission) == (
        EffectFact.NONE_VERIFIED,
        Admission.HOLD_FOR_REVIEW,
    )
    reviewed = rig.sh.review(outcome.case.case_id, effect="absent", note="quota raised", actor="PM")
    assert reviewed.admission is Admission.REEXECUTE
    assert rig.sh.run_session(task_id).outcome == "settled"
    assert len(rig.ledger.of(task_id)) == 1


@pytest.mark.parametrize("bucket", [Bucket.INBOX, Bucket.REVIEW, Bucket.DONE])
def test_recover_of_a_task_that_is_not_active_is_not_an_interruption(
    rig: Rig, bucket: Bucket
) -> None:
    task_id = rig.new_task()
    if bucket is not Bucket.INBOX:
        charging_agent(rig)
        rig.sh.run_session(task_id)
        if bucket is Bucket.DONE:
            rig.sh.transition(task_id, Action.APPROVE, actor="PM")
    assert rig.task(task_id).bucket is bucket

    outcome = rig.sh.recover(task_id, actor="PM")

    assert outcome.admission is Admission.NOT_ADMITTED
    assert "not an interruption" in outcome.reason
    assert rig.cases_of(task_id) == []


def test_recover_of_rework_after_a_reject_is_not_an_interruption(rig: Rig) -> None:
    """review -> active by reject keeps its own path: the classifier reads the attempt that
    ended normally, whatever the caller asks; no case, no reconciled REPORT."""
    task_id = rig.new_task()
    charging_agent(rig)
    assert rig.sh.run_session(task_id).outcome == "settled"
    rig.sh.transition(task_id, Action.REJECT, actor="PM", reason="add the receipt number")
    reports_before = rig.reports(task_id)

    outcome = rig.sh.recover(task_id, actor="PM")

    assert outcome.admission is Admission.NOT_ADMITTED
    assert "not an interruption" in outcome.reason
    assert rig.cases_of(task_id) == []
    assert rig.task(task_id).bucket is Bucket.ACTIVE
    assert rig.reports(task_id) == reports_before


@pytest.mark.parametrize("actor", ["SYSTEM", "dev", ""])
def test_recover_and_review_refuse_a_malformed_actor_with_a_typed_error(
    rig: Rig, actor: str
) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    with pytest.raises(ValidationFailed) as recover_error:
        rig.sh.recover(task_id, actor=actor)
    with pytest.raises(ValidationFailed) as review_error:
        rig.sh.review(case.case_id, effect="absent", note="checked", actor=actor)
    assert recover_error.value.field == review_error.value.field == "actor"


# -- holds -----------------------------------------------------------------------------------


def test_a_held_task_stays_active_and_shows_its_hold_in_python_and_cli_json(rig: Rig) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)

    task = rig.sh.get_task(task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.hold is not None
    assert task.hold.case_id == case.case_id
    assert task.hold.reason == "effect unknown: open intent without key or probe"
    hold_json = {"case_id": case.case_id, "reason": task.hold.reason}
    assert task.to_dict()["hold"] == hold_json
    [listed] = [t for t in rig.sh.list_tasks(bucket="active") if t.task_id == task_id]
    assert listed.hold == task.hold

    shown = cli(rig.store, "show", task_id)
    assert shown["task"]["bucket"] == "active"
    assert shown["task"]["hold"] == hold_json
    assert [c["admission"] for c in shown["cases"]] == ["hold_for_review"]
    assert "hold" in [event["kind"] for event in shown["history"]]
    listing = cli(rig.store, "tasks")
    assert [t["hold"] for t in listing if t["task_id"] == task_id] == [hold_json]
    open_cases = cli(rig.store, "cases", "--state", "open")
    assert [(c["case_id"], c["effect_fact"]) for c in open_cases] == [(case.case_id, "unknown")]


def test_a_held_task_blocks_every_dispatch_path(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    published: list[str] = []
    with open_rig(store, clock, tmp_path, publisher=lambda t: published.append(t.task_id)) as r:
        task_id, session = held_task(r)
        published.clear()

        assert r.sh.run_session(task_id).outcome == "not_claimed"  # claim refused
        assert r.events(task_id, EventKind.CLAIM_REFUSED)[-1].data["why"] == "NotClaimable"
        assert not dispatch.publish_successor(r.services, task_id)
        assert dispatch.sweep(r.services) == 0
        r.clock.advance(GRACE_SECONDS * 10)
        report = r.reconcile()
        assert report.republished == 0
        assert published == []
        # Nor can the TASK be moved past its hold by a lifecycle action.
        with pytest.raises(TaskHeld):
            r.sh.transition(task_id, Action.FINISH, actor="DEV")
        assert r.task(task_id).bucket is Bucket.ACTIVE
        assert r.attempts(task_id)[-1].attempt_id == session.attempt.attempt_id


@pytest.mark.parametrize(
    ("sender", "recipient", "refused", "approver"),
    [("PM", "DEV", ["DEV", "QA"], "PM"), ("ADMIN", "PM", ["PM", "DEV"], "ADMIN")],
    ids=["PM-to-DEV", "ADMIN-to-PM"],
)
def test_only_the_tasks_approver_may_release_a_hold(
    rig: Rig, sender: str, recipient: str, refused: list[str], approver: str
) -> None:
    task_id, _ = held_task(rig, sender=sender, recipient=recipient)
    case = rig.case_of(task_id)

    for actor in refused:
        with pytest.raises(NotAuthorized):
            rig.sh.review(case.case_id, effect="absent", note="looked at it", actor=actor)
    assert rig.task(task_id).hold is not None
    assert rig.case_of(task_id) == case
    assert rig.events(task_id, EventKind.REVIEW) == []

    decided = rig.sh.review(case.case_id, effect="absent", note="no charge", actor=approver)

    assert decided.admission is Admission.REEXECUTE
    assert decided.decided_by == approver
    assert rig.task(task_id).hold is None


def test_review_absent_releases_the_hold_and_the_successor_runs_the_effect_once(rig: Rig) -> None:
    task_id, session = held_task(rig)
    case = rig.case_of(task_id)
    charging_agent(rig)

    decided = rig.sh.review(
        case.case_id, effect="absent", note="no charge in the gateway log", actor="PM"
    )

    assert (decided.effect_fact, decided.admission) == (
        EffectFact.NONE_VERIFIED,
        Admission.REEXECUTE,
    )
    assert decided.review is not None
    assert decided.review["effect"] == "absent"
    assert decided.review["by"] == "PM"
    assert decided.review["note"] == "no charge in the gateway log"
    [review] = rig.events(task_id, EventKind.REVIEW)
    assert (review.by, review.reason, review.data["effect"]) == (
        "PM",
        "no charge in the gateway log",
        "absent",
    )
    [released] = rig.events(task_id, EventKind.HOLD_RELEASED)
    assert released.data["case_id"] == case.case_id
    [charge] = rig.operations(task_id)
    assert charge.state is OperationState.FAILED
    assert charge.outcome is not None
    assert charge.outcome["probe"] == "absent"
    assert charge.outcome["source"] == "review:PM"
    assert [e.data["admission"] for e in rig.events(task_id, EventKind.ADMISSION)] == [
        "hold_for_review",
        "reexecute",
    ]

    assert rig.sh.run_session(task_id).outcome == "settled"
    assert [e.attempt for e in rig.ledger.of(task_id)] == [2]
    assert rig.task(task_id).bucket is Bucket.REVIEW
    assert rig.case_of(task_id).successor_attempt_id == rig.attempts(task_id)[1].attempt_id
    assert session.attempt.attempt_id == rig.attempts(task_id)[0].attempt_id


def test_review_present_reconciles_the_report_and_records_the_effect_as_present(
    rig: Rig,
) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    charging_agent(rig)

    decided = rig.sh.review(
        case.case_id, effect="present", note="charge ch_42 in the gateway", actor="PM"
    )

    assert (decided.effect_fact, decided.admission) == (
        EffectFact.CONFIRMED,
        Admission.RECONCILE_ONLY,
    )
    assert decided.state is CaseState.RESOLVED
    task = rig.task(task_id)
    assert (task.bucket, task.hold) == (Bucket.REVIEW, None)
    [report] = rig.reports(task_id)
    assert "Review: effect present — charge ch_42 in the gateway" in report.body
    [charge] = rig.operations(task_id)
    assert charge.state is OperationState.SUCCEEDED
    assert charge.outcome == {
        "probe": "present",
        "source": "review:PM",
        "note": "charge ch_42 in the gateway",
        "principal": "local",
    }
    assert rig.sh.run_session(task_id).outcome == "not_claimed"
    assert rig.ledger.of(task_id) == []


def test_review_through_the_cli_is_recorded_and_refused_for_a_worker_role(rig: Rig) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    runner = CliRunner()
    base = ["review", case.case_id, "--effect", "absent", "--note", "no charge"]
    ns = {"SUREHAND_REDIS_NAMESPACE": rig.sh.settings.redis_namespace}

    refused = runner.invoke(
        app, [*base, "--actor", "DEV", "--json", "--database-url", rig.store.url], env=ns
    )
    assert refused.exit_code == 6, refused.output
    assert json.loads(refused.stdout)["error"]["code"] == "not_authorized"

    accepted = runner.invoke(
        app, [*base, "--actor", "PM", "--json", "--database-url", rig.store.url], env=ns
    )
    assert accepted.exit_code == 0, accepted.output
    decided = json.loads(accepted.stdout)
    assert (decided["admission"], decided["review"]["by"]) == ("reexecute", "PM")
    assert rig.task(task_id).hold is None


def test_review_needs_a_held_case_and_a_note(rig: Rig) -> None:
    task_id, _ = rig.interrupted()
    case = rig.lose(task_id)  # reexecute: not held
    with pytest.raises(RecoveryError, match="not held for review"):
        rig.sh.review(case.case_id, effect="absent", note="x", actor="PM")
    held_id, _ = held_task(rig)
    with pytest.raises(ValidationFailed, match="note"):
        rig.sh.review(rig.case_of(held_id).case_id, effect="absent", note="  ", actor="PM")
    with pytest.raises(CaseNotFound):
        rig.sh.review("CASE-19990101-001-1", effect="absent", note="x", actor="PM")


def test_a_case_is_invisible_and_unreviewable_from_another_tenant(
    rig: Rig, store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    with open_rig(store, clock, tmp_path, tenant="other-tenant") as other:
        assert other.sh.cases() == []
        with pytest.raises(CaseNotFound):
            other.sh.review(case.case_id, effect="absent", note="x", actor="PM")
    assert rig.task(task_id).hold is not None


# -- the recovery fence ----------------------------------------------------------------------


def bump_revision(rig: Rig, task_id: str) -> int:
    """A change to the TASK after admission decided (any compare-and-set bumps the revision)."""
    task = rig.task(task_id)
    with rig.store.transaction() as connection:
        assert task_moves.update_if(
            connection,
            task_id,
            expect={"revision": task.revision},
            values={"published": not task.published},
            now=rig.clock.now(),
        )
    return task.revision + 1


def test_a_reexecute_decided_on_an_older_revision_is_refused_and_decided_again(rig: Rig) -> None:
    task_id, _ = rig.interrupted()
    case = rig.lose(task_id)
    assert case.admission is Admission.REEXECUTE
    revision = bump_revision(rig, task_id)
    charging_agent(rig)

    assert rig.sh.run_session(task_id).outcome == "not_claimed"

    [refused] = rig.events(task_id, EventKind.CLAIM_REFUSED)
    assert refused.data["why"] == "StaleDecision"
    assert len(rig.attempts(task_id)) == 1
    assert rig.case_of(task_id).revision_at_evaluation == case.revision_at_evaluation

    rig.clock.advance(1)
    rig.reconcile()  # re-evaluates the stale decision on the current revision

    again = rig.case_of(task_id)
    assert again.admission is Admission.REEXECUTE
    assert again.revision_at_evaluation == revision
    assert again.decided_at == rig.clock.now()
    assert len(rig.events(task_id, EventKind.ADMISSION)) == 2
    assert rig.sh.run_session(task_id).outcome == "settled"
    assert len(rig.ledger.of(task_id)) == 1


def test_a_task_changed_while_admission_evaluated_is_decided_by_the_next_pass(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change between reading the evidence and recording the decision makes the decision
    stale before it is recorded: nothing is decided or applied, and the pass goes on."""
    calls: list[str] = []

    def evaluate_while_the_task_changes(attempt: Attempt, *args: Any) -> Evidence:
        calls.append(attempt.task_id)
        if calls.count(task_id) == 1 and attempt.task_id == task_id:
            bump_revision(rig, task_id)
        return evaluate(attempt, *args)

    monkeypatch.setattr(admission, "evaluate", evaluate_while_the_task_changes)
    task_id = rig.new_task()
    session = rig.claim(task_id)
    rig.intent(session, "charge")
    other_id, other = rig.interrupted()

    rig.reconcile()
    rig.clock.advance(GRACE_SECONDS)
    report = rig.reconcile()

    assert report.lost == 2  # the stale decision did not stop the pass
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.SESSION_LOST
    assert rig.case_of(other_id).admission is Admission.REEXECUTE
    assert rig.attempt(other.attempt.attempt_id).state is AttemptState.SESSION_LOST
    # The stale evaluation recorded nothing; the pass decided the open case again, on the
    # TASK as it is now.
    assert calls.count(task_id) == 2
    decided = rig.case_of(task_id)
    assert decided.admission is Admission.HOLD_FOR_REVIEW
    assert decided.revision_at_evaluation == rig.task(task_id).revision
    assert rig.task(task_id).hold is not None
    assert [e.data["admission"] for e in rig.events(task_id, EventKind.ADMISSION)] == [
        "hold_for_review"
    ]
    assert len(rig.events(task_id, EventKind.HOLD)) == 1


# -- late writes of the interrupted owner ----------------------------------------------------

Disposition = Literal["reexecute", "successor-running", "hold", "reconcile"]


@pytest.fixture(params=["reexecute", "successor-running", "hold", "reconcile"])
def decided(request: pytest.FixtureRequest, rig: Rig) -> tuple[Rig, Session, str]:
    """An interrupted session whose case has been decided, with each disposition."""
    kind: Disposition = request.param
    task_id = rig.new_task()
    session = rig.claim(task_id)
    if kind == "hold":
        rig.intent(session, "charge")
    if kind == "reconcile":
        rig.seed(session, ops=[{"name": "charge", "outcome": "ok"}], returned=True)
    rig.lose(task_id)
    if kind == "successor-running":
        rig.claim(task_id)  # the successor claimed attempt 2 and is working
    return rig, session, kind


def snapshot(rig: Rig, task_id: str) -> tuple[InterruptionCase, Task, int]:
    return rig.case_of(task_id), rig.task(task_id), len(rig.reports(task_id))


WRITES: dict[str, Callable[[Session], object]] = {
    "record_return": lambda s: s.settle("late result", to_review=True),  # a settle's first write
    "report": lambda s: s.report("late REPORT", ReportStatus.DONE, None),
    "fail": lambda s: s.fail(RuntimeError("late failure")),
    "operation_intent:charge": lambda s: run_operation(
        s,
        "charge",
        CHARGE_ARGS,
        lambda: pytest.fail("a fenced operation must not run its effect"),
        idempotency_key=None,
        retry_policy=RetryPolicy.NONE,
        probe=None,
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_a_late_write_of_the_interrupted_owner_is_fenced_and_changes_nothing(
    decided: tuple[Rig, Session, str], write: str
) -> None:
    rig, session, _kind = decided
    task_id = session.task_id
    before = snapshot(rig, task_id)
    attempts_before = rig.attempts(task_id)

    with pytest.raises(StaleOwner):
        WRITES[write](session)

    assert snapshot(rig, task_id) == before  # same case, disposition, TASK revision, REPORTs
    assert rig.attempts(task_id) == attempts_before
    [fenced] = rig.events(task_id, EventKind.STALE_OWNER_FENCED)
    assert fenced.attempt_id == session.attempt.attempt_id
    assert fenced.epoch == 1
    assert fenced.data["write"] == write
    assert fenced.data["current_epoch"] == rig.task(task_id).epoch


def test_the_successor_keeps_writing_after_the_old_owner_was_fenced(rig: Rig) -> None:
    task_id, session = rig.interrupted()
    rig.lose(task_id)
    successor = rig.claim(task_id)

    with pytest.raises(StaleOwner):
        session.settle("late", to_review=True)

    assert successor.settle("fresh result", to_review=True).bucket is Bucket.REVIEW
    [report] = rig.reports(task_id)
    assert report.attempt_id == successor.attempt.attempt_id
    assert rig.case_of(task_id).successor_attempt_id == successor.attempt.attempt_id
    assert [e.epoch for e in rig.events(task_id, EventKind.STALE_OWNER_FENCED)] == [1]
