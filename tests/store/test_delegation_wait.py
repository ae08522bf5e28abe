"""Waiting without holding a worker: ``wait_for(children)`` ends the attempt (succeeded), puts
the parent back in ``inbox`` waiting for its children as for dependencies, and releases its
lease; the move to done of the last child queues the parent again, and its next attempt is
briefed with the children's REPORTs. A held (or failed) child wakes it too. Fenced like every
session write.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from surehand.agents.context import SessionContext
from surehand.dispatcher import actions, dispatch
from surehand.dispatcher.claims import claim
from surehand.dispatcher.delegation import delegate, wait_for
from surehand.errors import StaleOwner, ValidationFailed
from surehand.facade import Surehand
from surehand.model import Action, Admission, AttemptState, Bucket, Task
from surehand.store import schema as tables
from surehand.store import tasks
from tests.session_helpers import (
    Harness,
    attempts_of,
    claimed,
    committed_task,
    read_task,
    reports_of,
)


def queued(sh: Surehand) -> list[str]:
    with sh.store.snapshot() as connection:
        return list(connection.execute(select(tables.outbox.c.task_id)).scalars())


def drained(sh: Surehand) -> None:
    with sh.store.transaction() as connection:
        connection.execute(tables.outbox.delete())


def ready(sh: Surehand, task_id: str) -> bool:
    with sh.store.snapshot() as connection:
        return tasks.ready(connection, task_id)


def pm_task(sh: Surehand) -> str:
    return committed_task(sh, sender="ADMIN", recipient="PM", subject="Ship the login fix")


def children_of(sh: Surehand, parent: str) -> dict[str, Task]:
    with sh.store.snapshot() as connection:
        return {t.fields.recipient: t for t in tasks.children(connection, parent)}


def approve(sh: Surehand, task_id: str) -> None:
    actions.transition(sh.services, task_id, Action.APPROVE, tenant="default", actor="PM")


def test_a_pm_waits_for_its_children_without_a_worker_and_resumes_with_their_reports(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    seen: list[list[dict[str, Any]]] = []

    def pm(ctx: SessionContext) -> str:
        if ctx.attempt.number == 1:
            dev = ctx.delegate("DEV", "Build the login fix", key="dev")
            assert dev.task_id is not None
            ctx.delegate("QA", "Test the login fix", key="qa", depends_on=[dev.task_id])
            answer = ctx.wait_for()
            assert answer["status"] == "waiting"
            return "never settled"
        children = ctx.children()
        seen.append(children)
        return "; ".join(f"{c['recipient']}: {c['report']}" for c in children)

    sh.registry.register("PM", pm)
    sh.registry.register("DEV", lambda ctx: "built on branch fix-login")
    sh.registry.register("QA", lambda ctx: "all 12 tests pass")
    parent = pm_task(sh)

    first = sh.run_session(parent)

    assert (first.outcome, first.bucket) == ("waiting", "inbox")
    task = read_task(sh.store, parent)
    assert (task.bucket, task.published, task.epoch) == (Bucket.INBOX, False, 1)
    [attempt] = attempts_of(sh.store, parent)
    assert attempt.state is AttemptState.SUCCEEDED
    assert sh.leases.holder(parent) is None  # no lease, no worker held while it waits
    assert reports_of(sh.store, parent) == []
    note = dispatch.waiting_note(sh.services, task)
    assert note is not None
    assert note.startswith("waiting for ")
    assert claim(sh.services, parent, worker="eager", message_id=None) is None

    children = children_of(sh, parent)
    sh.run_session(children["DEV"].task_id)
    approve(sh, children["DEV"].task_id)
    assert not ready(sh, parent)  # QA is not done yet
    drained(sh)
    sh.run_session(children["QA"].task_id)
    approve(sh, children["QA"].task_id)
    assert queued(sh) == [parent]  # queued by the last child's move to done

    again = sh.run_session(parent)

    assert (again.outcome, again.attempt) == ("settled", 2)
    [briefed] = seen
    assert {c["recipient"]: (c["bucket"], c["report"]) for c in briefed} == {
        "DEV": ("done", "built on branch fix-login"),
        "QA": ("done", "all 12 tests pass"),
    }
    [report] = reports_of(sh.store, parent)
    assert "DEV: built on branch fix-login" in report.body


def test_children_done_already_answer_ready_and_the_session_goes_on(harness: Harness) -> None:
    sh = harness.surehand()
    sh.registry.register("DEV", lambda ctx: "built", review=False)
    session = claimed(sh.services, pm_task(sh))
    dev = delegate(session, {"recipient": "DEV", "subject": "Build", "key": "dev"})
    assert dev.task_id is not None
    sh.run_session(dev.task_id)

    answer = wait_for(session, [dev.task_id])

    assert answer["status"] == "ready"
    assert read_task(sh.store, session.task_id).bucket is Bucket.ACTIVE
    assert session.settle("all done", to_review=True).bucket is Bucket.REVIEW


def a_dev_that_breaks(sh: Surehand) -> None:
    """DEV's agent fails with nothing observed: its TASK is held for its approver, not retried."""

    def broken(ctx: SessionContext) -> str:
        raise RuntimeError("the build server is down")

    broken.effects_observed = None  # type: ignore[attr-defined]  # held, not retried
    sh.registry.register("DEV", broken)


def test_a_held_child_wakes_its_waiting_parent(harness: Harness) -> None:
    sh = harness.surehand()

    a_dev_that_breaks(sh)
    session = claimed(sh.services, pm_task(sh))
    dev = delegate(session, {"recipient": "DEV", "subject": "Build", "key": "dev"})
    qa = delegate(session, {"recipient": "QA", "subject": "Test", "key": "qa"})
    assert dev.task_id is not None
    assert qa.task_id is not None
    wait_for(session, [])
    drained(sh)

    sh.run_session(dev.task_id)  # the agent fails: its TASK is held for its approver
    sh.reconcile()  # admission decides the failed attempt's case (and the publisher is off)

    assert read_task(sh.store, dev.task_id).hold is not None
    assert ready(sh, session.task_id)  # QA is still open, yet the parent runs again
    assert queued(sh) == [session.task_id]
    successor = claimed(sh.services, session.task_id)
    assert successor.attempt.number == 2


def test_a_stale_attempt_cannot_wait(harness: Harness) -> None:
    sh = harness.surehand()
    parent = pm_task(sh)
    first = claimed(sh.services, parent, worker="first")
    delegate(first, {"recipient": "DEV", "subject": "Build", "key": "dev"})
    case = sh.recovery.lose(first.attempt, state=AttemptState.SESSION_LOST, by="test")
    assert case is not None
    assert case.admission is Admission.REEXECUTE
    claimed(sh.services, parent, worker="second")

    with pytest.raises(StaleOwner):
        wait_for(first, [])

    assert read_task(sh.store, parent).bucket is Bucket.ACTIVE


def test_only_children_can_be_waited_for(harness: Harness) -> None:
    sh = harness.surehand()
    session = claimed(sh.services, pm_task(sh))
    stranger = committed_task(sh)
    for children in ([stranger], []):
        with pytest.raises(ValidationFailed) as refused:
            wait_for(session, children)
        assert refused.value.field == "children"
    assert read_task(sh.store, session.task_id).bucket is Bucket.ACTIVE


def test_a_child_held_already_answers_ready_instead_of_waiting(harness: Harness) -> None:
    sh = harness.surehand()

    a_dev_that_breaks(sh)
    session = claimed(sh.services, pm_task(sh))
    dev = delegate(session, {"recipient": "DEV", "subject": "Build", "key": "dev"})
    assert dev.task_id is not None
    sh.run_session(dev.task_id)
    sh.reconcile()

    answer = wait_for(session, [])

    assert (answer["status"], answer["held"]) == ("ready", [dev.task_id])
    assert read_task(sh.store, session.task_id).bucket is Bucket.ACTIVE


def test_a_child_settling_to_done_in_a_worker_publishes_its_waiting_parent(
    harness: Harness,
) -> None:
    published: list[str] = []
    sh = Surehand(
        settings=harness.settings(),
        clock=harness.clock,
        publisher=lambda task: published.append(task.task_id),
    )
    harness.handles.append(sh)
    sh.registry.register("DEV", lambda ctx: "built", review=False)
    session = claimed(sh.services, pm_task(sh))
    dev = delegate(session, {"recipient": "DEV", "subject": "Build", "key": "dev"})
    assert dev.task_id is not None
    wait_for(session, [])
    published.clear()  # the creations' messages

    assert sh.run_session(dev.task_id).bucket == "done"

    assert published.count(session.task_id) == 1  # by the runner, after the move's commit
    assert read_task(sh.store, session.task_id).published
