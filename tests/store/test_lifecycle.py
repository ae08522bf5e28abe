"""Lifecycle moves: the edge table, authority, holds, reasons, REPORT requirements, history."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from surehand.dispatcher import lifecycle, reports, submissions, transitions
from surehand.dispatcher.context import Services
from surehand.errors import (
    Conflict,
    IllegalTransition,
    NotAuthorized,
    TaskHeld,
    TaskNotFound,
    ValidationFailed,
)
from surehand.model import SYSTEM, Action, Bucket, EventKind, Fence, Task, TaskEvent
from surehand.store import events, task_moves, tasks
from surehand.testing import ManualClock

PATH_TO = {
    Bucket.INBOX: [],
    Bucket.ACTIVE: [Action.CLAIM],
    Bucket.REVIEW: [Action.CLAIM, Action.SUBMIT],
    Bucket.DONE: [Action.CLAIM, Action.FINISH],
    Bucket.ARCHIVE: [Action.CLAIM, Action.FINISH, Action.ARCHIVE],
}
ALLOWED = [
    (action, source, target)
    for action, (first, target) in lifecycle.EDGES.items()
    for source in (first, *sorted(lifecycle.OTHER_SOURCES.get(action, ())))
]
ALLOWED_MOVES = [(a, s, t) for a, s, t in ALLOWED if s is not None]
DISALLOWED = [
    (bucket, action)
    for bucket in Bucket
    for action in Action
    if bucket not in lifecycle.sources(action)
]


# -- helpers --------------------------------------------------------------------------------


def new_task(services: Services, sender: str = "PM", recipient: str = "DEV") -> Task:
    request = {"sender": sender, "recipient": recipient, "subject": "Build it", "body": "Do X."}
    created = submissions.write_task(services, request, tenant="t1")
    assert created.task_id is not None
    return load(services, created.task_id)


def load(services: Services, task_id: str) -> Task:
    with services.store.snapshot() as connection:
        task = tasks.get(connection, task_id)
    assert task is not None
    return task


def history(services: Services, task_id: str) -> list[TaskEvent]:
    with services.store.snapshot() as connection:
        return events.history(connection, task_id, EventKind.TRANSITION)


def move(services: Services, task_id: str, action: Action, by: str = SYSTEM, **kw: Any) -> Task:
    """An internal move (``apply``) in its own transaction, as the runtime would make it."""
    with services.store.transaction() as connection:
        task = tasks.get_for_update(connection, task_id)
        assert task is not None
        move = lifecycle.Move(action, by=by, now=services.clock.now(), **kw)
        return lifecycle.apply(connection, task, move)


def report(services: Services, task_id: str, body: str = "It is done.") -> str:
    request = {"task_id": task_id, "reporter": "DEV", "body": body}
    return reports.write_report(services, request, tenant="t1").report.report_id


def drive_to(services: Services, bucket: Bucket, sender: str = "PM") -> Task:
    """A fresh TASK moved along the shortest legal path into ``bucket``."""
    task = new_task(services, sender=sender)
    for action in PATH_TO[bucket]:
        if action in lifecycle.REPORT_REQUIRED:
            report(services, task.task_id)
        task = move(services, task.task_id, action, reason="accepted")
    return task


def actor_for(action: Action) -> str:
    """A non-runtime role allowed to take ``action`` on a PM->DEV task (rollback and wait have
    none)."""
    if action in lifecycle.APPROVER_ACTIONS or action is Action.CANCEL:
        return "PM"
    return SYSTEM if action in (Action.ROLLBACK, Action.WAIT) else "DEV"


# -- the edge table -------------------------------------------------------------------------


def test_the_edge_table_has_exactly_the_designed_moves() -> None:
    assert set(lifecycle.EDGES) == set(Action)
    assert [(a.value, s and s.value, t.value) for a, s, t in ALLOWED] == [
        ("create", None, "inbox"),
        ("claim", "inbox", "active"),
        ("submit", "active", "review"),
        ("finish", "active", "done"),
        ("approve", "review", "done"),
        ("reject", "review", "active"),
        ("archive", "done", "archive"),
        ("rollback", "active", "inbox"),
        ("reopen", "done", "active"),
        ("cancel", "active", "archive"),
        ("cancel", "inbox", "archive"),
        ("wait", "active", "inbox"),
    ]


@pytest.mark.parametrize(("action", "source", "target"), ALLOWED_MOVES, ids=lambda v: str(v))
def test_every_allowed_edge_moves_the_task_and_appends_exactly_one_event(
    services: Services, action: Action, source: Bucket, target: Bucket
) -> None:
    task = drive_to(services, source)
    if action in lifecycle.REPORT_REQUIRED:
        report(services, task.task_id)
    before = history(services, task.task_id)
    by = actor_for(action)
    moved = move(services, task.task_id, action, by=by, reason="because")
    after = history(services, task.task_id)
    assert (moved.bucket, moved.revision) == (target, task.revision + 1)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 1
    event = after[-1]
    assert (event.from_bucket, event.to_bucket, event.action) == (source, target, action.value)
    assert (event.by, event.reason) == (by, "because")


@pytest.mark.parametrize(("bucket", "action"), DISALLOWED, ids=lambda v: str(v))
def test_every_disallowed_move_is_an_illegal_transition_that_changes_nothing(
    services: Services, bucket: Bucket, action: Action
) -> None:
    task = drive_to(services, bucket)
    before = history(services, task.task_id)
    with pytest.raises(IllegalTransition):
        move(services, task.task_id, action, reason="because")
    assert load(services, task.task_id) == task
    assert history(services, task.task_id) == before


def test_an_illegal_transition_names_the_edge_and_what_is_allowed(services: Services) -> None:
    task = new_task(services)
    with pytest.raises(IllegalTransition) as caught:
        move(services, task.task_id, Action.APPROVE, by="PM")
    assert "review -> done" in caught.value.message
    assert "inbox" in caught.value.message
    assert caught.value.details["allowed"] == ["claim", "cancel"]


# -- authority ------------------------------------------------------------------------------


def test_dev_cannot_approve_its_own_task(services: Services) -> None:
    task = drive_to(services, Bucket.REVIEW)
    with pytest.raises(NotAuthorized):
        move(services, task.task_id, Action.APPROVE, by="DEV")
    assert load(services, task.task_id).bucket is Bucket.REVIEW


def test_pm_cannot_approve_an_admin_to_pm_task(services: Services) -> None:
    task = new_task(services, sender="ADMIN", recipient="PM")
    with services.store.transaction() as connection:
        claim = lifecycle.Move(Action.CLAIM, by="PM", now=services.clock.now())
        lifecycle.apply(connection, task, claim)
    reports.write_report(
        services, {"task_id": task.task_id, "reporter": "PM", "body": "ok"}, tenant="t1"
    )
    move(services, task.task_id, Action.SUBMIT, by="PM")
    with pytest.raises(NotAuthorized):
        move(services, task.task_id, Action.APPROVE, by="PM")
    assert move(services, task.task_id, Action.APPROVE, by="ADMIN").bucket is Bucket.DONE


def test_admin_may_approve_a_pm_to_worker_task(services: Services) -> None:
    task = drive_to(services, Bucket.REVIEW)
    assert lifecycle.approvers(task) == {"PM", "ADMIN"}
    assert move(services, task.task_id, Action.APPROVE, by="ADMIN").bucket is Bucket.DONE


def test_only_the_recipient_may_submit_or_claim(services: Services) -> None:
    task = new_task(services)
    with pytest.raises(NotAuthorized):
        move(services, task.task_id, Action.CLAIM, by="QA")
    move(services, task.task_id, Action.CLAIM, by="DEV")
    report(services, task.task_id)
    with pytest.raises(NotAuthorized):
        move(services, task.task_id, Action.SUBMIT, by="QA")


@pytest.mark.parametrize("action", [Action.ROLLBACK, Action.WAIT])
def test_rollback_and_wait_are_the_runtimes_moves_alone(services: Services, action: Action) -> None:
    task = drive_to(services, Bucket.ACTIVE)
    for role in ("DEV", "PM", "ADMIN"):
        with pytest.raises(NotAuthorized):
            move(services, task.task_id, action, by=role)
    assert move(services, task.task_id, action).bucket is Bucket.INBOX


def test_nobody_external_can_act_as_system(services: Services) -> None:
    task = new_task(services)
    with pytest.raises(NotAuthorized):
        transitions.transition(services, task.task_id, Action.CLAIM, actor=SYSTEM, tenant="t1")
    assert load(services, task.task_id).bucket is Bucket.INBOX


def test_an_actor_that_is_not_a_role_code_is_a_validation_error(services: Services) -> None:
    task = new_task(services)
    with pytest.raises(ValidationFailed) as caught:
        transitions.transition(services, task.task_id, Action.CLAIM, actor="dev", tenant="t1")
    assert caught.value.field == "actor"


def test_transition_by_the_public_door_commits_the_move(services: Services) -> None:
    task = new_task(services)
    moved = transitions.transition(services, task.task_id, Action.CLAIM, actor="DEV", tenant="t1")
    assert moved.bucket is Bucket.ACTIVE
    assert load(services, task.task_id) == moved


def test_another_tenants_task_is_not_found(services: Services) -> None:
    task = new_task(services)
    with pytest.raises(TaskNotFound):
        transitions.transition(services, task.task_id, Action.CLAIM, actor="DEV", tenant="t2")
    with pytest.raises(TaskNotFound):
        # A day nothing was created on: a permuted number of today's could be any NNN.
        transitions.transition(
            services, "TASK-20200101-999", Action.CLAIM, actor="DEV", tenant="t1"
        )


# -- reasons and REPORTs --------------------------------------------------------------------


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_reject_without_a_reason_is_refused(services: Services, reason: str | None) -> None:
    task = drive_to(services, Bucket.REVIEW)
    with pytest.raises(ValidationFailed) as caught:
        move(services, task.task_id, Action.REJECT, by="PM", reason=reason)
    assert caught.value.field == "reason"
    assert load(services, task.task_id).bucket is Bucket.REVIEW


@pytest.mark.parametrize("action", [Action.ARCHIVE, Action.REOPEN])
def test_archive_and_reopen_without_a_reason_are_refused(
    services: Services, action: Action
) -> None:
    task = drive_to(services, Bucket.DONE)
    with pytest.raises(ValidationFailed):
        move(services, task.task_id, action, by="PM", reason=" ")
    assert load(services, task.task_id).bucket is Bucket.DONE


@pytest.mark.parametrize("action", [Action.SUBMIT, Action.FINISH])
def test_submit_and_finish_without_any_report_are_refused(
    services: Services, action: Action
) -> None:
    task = drive_to(services, Bucket.ACTIVE)
    with pytest.raises(IllegalTransition) as caught:
        move(services, task.task_id, action, by="DEV")
    assert caught.value.details["missing"] == "report"
    assert load(services, task.task_id).bucket is Bucket.ACTIVE


def test_submit_citing_another_tasks_report_is_refused(services: Services) -> None:
    other = drive_to(services, Bucket.ACTIVE)
    foreign = report(services, other.task_id)
    task = drive_to(services, Bucket.ACTIVE)
    report(services, task.task_id)
    with pytest.raises(ValidationFailed) as caught:
        move(services, task.task_id, Action.SUBMIT, by="DEV", report_id=foreign)
    assert caught.value.field == "report_id"


def test_submit_without_a_report_id_cites_the_latest_report(services: Services) -> None:
    task = drive_to(services, Bucket.ACTIVE)
    report(services, task.task_id, "first draft")
    latest = report(services, task.task_id, "final")
    move(services, task.task_id, Action.SUBMIT, by="DEV")
    assert history(services, task.task_id)[-1].data == {"report_id": latest}


def test_submit_naming_a_report_records_it(services: Services) -> None:
    task = drive_to(services, Bucket.ACTIVE)
    first = report(services, task.task_id, "first draft")
    report(services, task.task_id, "final")
    move(services, task.task_id, Action.SUBMIT, by="DEV", report_id=first)
    assert history(services, task.task_id)[-1].data == {"report_id": first}


@pytest.mark.parametrize(
    ("bucket", "action"), [(Bucket.REVIEW, Action.REJECT), (Bucket.DONE, Action.REOPEN)]
)
def test_reject_and_reopen_start_a_new_rework_round(
    services: Services, bucket: Bucket, action: Action
) -> None:
    task = drive_to(services, bucket)
    moved = move(services, task.task_id, action, by="PM", reason="needs tests")
    assert (moved.bucket, moved.rework_round) == (Bucket.ACTIVE, task.rework_round + 1)
    assert history(services, task.task_id)[-1].data == {"rework_round": 1}


# -- holds and races ------------------------------------------------------------------------


def _hold(services: Services, task_id: str) -> None:
    with services.store.transaction() as connection:
        held = task_moves.update_if(
            connection,
            task_id,
            expect={},
            values={"hold_case_id": "CASE-1", "hold_reason": "session lost"},
            now=services.clock.now(),
        )
    assert held


@pytest.mark.parametrize("by", [SYSTEM, "DEV", "PM"])
def test_a_held_task_refuses_every_move(services: Services, by: str) -> None:
    task = drive_to(services, Bucket.ACTIVE)
    report(services, task.task_id)
    _hold(services, task.task_id)
    for action in (Action.SUBMIT, Action.FINISH, Action.ROLLBACK):
        with pytest.raises(TaskHeld) as caught:
            move(services, task.task_id, action, by=by)
        assert caught.value.details["case_id"] == "CASE-1"
    assert load(services, task.task_id).bucket is Bucket.ACTIVE


def test_a_move_from_a_stale_read_is_a_conflict_and_writes_nothing(services: Services) -> None:
    stale = new_task(services)
    move(services, stale.task_id, Action.CLAIM)
    move(services, stale.task_id, Action.ROLLBACK)
    before = history(services, stale.task_id)
    claim = lifecycle.Move(Action.CLAIM, by=SYSTEM, now=services.clock.now())
    with services.store.transaction() as connection, pytest.raises(Conflict):
        lifecycle.apply(connection, stale, claim)
    assert history(services, stale.task_id) == before


def test_extra_expectations_guard_the_compare_and_set(services: Services) -> None:
    task = new_task(services)
    with pytest.raises(Conflict):
        move(services, task.task_id, Action.CLAIM, fence=Fence("A-0", task.task_id, 7))
    opens = lifecycle.Fencing.OPENS
    moved = move(
        services, task.task_id, Action.CLAIM, fence=Fence("A-1", task.task_id, 1), fencing=opens
    )
    assert moved.epoch == 1
    event = history(services, task.task_id)[-1]
    assert (event.attempt_id, event.epoch) == ("A-1", 1)


def test_eight_concurrent_claims_let_exactly_one_win(services: Services) -> None:
    task = new_task(services)
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def claim() -> None:
        barrier.wait()
        try:
            transitions.transition(services, task.task_id, Action.CLAIM, actor="DEV", tenant="t1")
            outcomes.append("won")
        except (IllegalTransition, Conflict) as error:
            outcomes.append(error.code)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("won") == 1
    assert len(outcomes) == 8
    assert [e.action for e in history(services, task.task_id)] == ["create", "claim"]


# -- history --------------------------------------------------------------------------------


def test_history_is_append_only_and_ordered(services: Services, clock: ManualClock) -> None:
    task = new_task(services)
    plan = [
        (Action.CLAIM, "DEV", None),
        (Action.SUBMIT, "DEV", None),
        (Action.REJECT, "PM", "add tests"),
        (Action.SUBMIT, "DEV", None),
        (Action.APPROVE, "PM", None),
        (Action.ARCHIVE, "PM", "accepted"),
    ]
    seen: list[TaskEvent] = history(services, task.task_id)
    for action, by, reason in plan:
        clock.advance(60)
        if action is Action.SUBMIT:
            report(services, task.task_id, f"round {load(services, task.task_id).rework_round}")
        move(services, task.task_id, action, by=by, reason=reason)
        now = history(services, task.task_id)
        assert now[: len(seen)] == seen  # nothing earlier changed
        seen = now
    assert [e.action for e in seen] == ["create"] + [a.value for a, _, _ in plan]
    assert all(a.to_bucket is b.from_bucket for a, b in itertools.pairwise(seen))
    assert [e.at for e in seen] == sorted(e.at for e in seen)
    # Ids are shown permuted (store/opaque.py): distinct, and in no order a tenant could count.
    assert len({e.event_id for e in seen}) == len(seen)
