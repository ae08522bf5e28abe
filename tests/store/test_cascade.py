"""Cascades (issue 34 item 4): cancelling a parent cancels its open children and theirs; a
dependency archived or cancelled holds its dependant for its approver; a held child is shown
on its parent. The service layer on both databases; sessions run in this process (the rig's
runner), their stop watch reading the store every 50 ms.
"""

from __future__ import annotations

import json
import threading

import pytest
from typer.testing import CliRunner

from surehand.agents.context import SessionContext
from surehand.cli import app
from surehand.dispatcher import cancel as cancel_module
from surehand.dispatcher import delegation, dispatch
from surehand.dispatcher.claims import claim
from surehand.errors import IllegalTransition, NotAuthorized
from surehand.facade import Surehand
from surehand.model import AttemptCause, AttemptState, Bucket, EventKind
from surehand.principals import Principal
from surehand.store import outbox
from surehand.ui import views
from tests.recovery_helpers import Rig

pytestmark = pytest.mark.rig(stop_check_seconds=0.05)


def as_role(rig: Rig, role: str) -> Surehand:
    return rig.sh.acting_as(Principal(f"{role.lower()}-token", role, rig.sh.tenant))


def child_of(rig: Rig, parent: str, sender: str, recipient: str, **fields: object) -> str:
    return rig.new_task(sender=sender, recipient=recipient, parent=parent, **fields)


def waits_to_be_stopped(rig: Rig, role: str) -> threading.Event:
    """Registers an agent for ``role`` that signals its start, then waits to be stopped."""
    running = threading.Event()

    def agent(ctx: SessionContext) -> str:
        running.set()
        ctx.wait_cancelled(30)
        return "finished anyway"

    rig.sh.agent(role)(agent)
    return running


def cancel_reasons(rig: Rig, task_id: str) -> list[tuple[str, str | None, str | None]]:
    asked = rig.events(task_id, EventKind.CANCEL_REQUESTED)
    return [(e.by, e.reason, e.principal) for e in asked]


# -- the cascade --------------------------------------------------------------------------------


def test_cancelling_a_parent_archives_its_inbox_children_and_grandchildren(rig: Rig) -> None:
    parent = rig.new_task(sender="PM", recipient="DEV")
    child = child_of(rig, parent, "DEV", "QA")
    grandchild = child_of(rig, child, "QA", "OPS")

    answer = as_role(rig, "PM").cancel(parent, reason="the customer withdrew")

    assert answer.outcome == "archived"
    for task_id in (parent, child, grandchild):
        assert rig.task(task_id).bucket is Bucket.ARCHIVE
        assert claim(rig.services, task_id, worker="w", message_id=None) is None
        assert rig.attempts(task_id) == []
    child_reason = f"parent {parent} cancelled: the customer withdrew"
    assert cancel_reasons(rig, child) == [("PM", child_reason, "pm-token")]
    assert cancel_reasons(rig, grandchild) == [
        ("PM", f"parent {child} cancelled: {child_reason}", "pm-token")
    ]
    [asked] = rig.events(child, EventKind.CANCEL_REQUESTED)
    assert asked.data["cascade_from"] == parent


def test_children_in_review_done_or_archive_are_left_alone_with_their_children(rig: Rig) -> None:
    rig.sh.agent("QA")(lambda ctx: "checked")
    parent = rig.new_task(sender="PM", recipient="DEV")
    reviewed = child_of(rig, parent, "DEV", "QA")
    rig.sh.run_session(reviewed)
    assert rig.task(reviewed).bucket is Bucket.REVIEW
    under_reviewed = child_of(rig, reviewed, "QA", "OPS")
    open_child = child_of(rig, parent, "DEV", "OPS")

    rig.sh.cancel(parent, reason="stop")

    assert (rig.task(reviewed).bucket, rig.task(reviewed).cancel) == (Bucket.REVIEW, None)
    assert (rig.task(under_reviewed).bucket, rig.task(under_reviewed).cancel) == (
        Bucket.INBOX,
        None,
    )
    assert rig.task(open_child).bucket is Bucket.ARCHIVE


def test_permission_is_checked_once_on_the_parent(rig: Rig) -> None:
    parent = rig.new_task(sender="QA", recipient="DEV")
    child = child_of(rig, parent, "DEV", "OPS")  # QA alone may not cancel this one
    with pytest.raises(NotAuthorized):
        as_role(rig, "QA").cancel(child, reason="not mine")
    with pytest.raises(NotAuthorized):
        as_role(rig, "DEV").cancel(parent, reason="the recipient may not")
    assert (rig.task(parent).cancel, rig.task(child).cancel) == (None, None)

    as_role(rig, "QA").cancel(parent, reason="withdrawn")

    assert rig.task(child).bucket is Bucket.ARCHIVE
    assert cancel_reasons(rig, child) == [
        ("QA", f"parent {parent} cancelled: withdrawn", "qa-token")
    ]


def test_a_running_child_session_is_stopped_like_any_cancel(rig: Rig) -> None:
    running = waits_to_be_stopped(rig, "QA")
    parent = rig.new_task(sender="PM", recipient="DEV")
    child = child_of(rig, parent, "DEV", "QA")
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(rig.sh.run_session(child)))
    thread.start()
    assert running.wait(10)

    rig.sh.cancel(parent, reason="runaway tree")

    thread.join(20)
    assert [o.outcome for o in outcome] == ["cancelled"]  # type: ignore[attr-defined]
    [attempt] = rig.attempts(child)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.CANCELLED)
    assert rig.task(child).bucket is Bucket.ARCHIVE
    [report] = rig.reports(child)
    assert f"parent {parent} cancelled: runaway tree" in report.body


def test_a_crash_mid_cascade_commits_nothing_and_asking_again_cancels_all(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = rig.new_task(sender="PM", recipient="DEV")
    children = [child_of(rig, parent, "DEV", "QA") for _ in range(3)]
    real_next = cancel_module._next
    seen: list[str] = []

    def dies_on_the_second_child(*args: object, **kwargs: object) -> object:
        task = args[2]
        seen.append(task.task_id)  # type: ignore[attr-defined]
        if len(seen) == 3:  # the parent, the first child, then the process dies
            raise SystemExit("killed mid-cascade")
        return real_next(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cancel_module, "_next", dies_on_the_second_child)
    with pytest.raises(SystemExit):
        rig.sh.cancel(parent, reason="stop")
    for task_id in (parent, *children):
        assert (rig.task(task_id).bucket, rig.task(task_id).cancel) == (Bucket.INBOX, None)
    monkeypatch.setattr(cancel_module, "_next", real_next)

    assert rig.sh.cancel(parent, reason="stop").outcome == "archived"
    assert {rig.task(c).bucket for c in children} == {Bucket.ARCHIVE}


def test_the_reconciler_finishes_a_cascade_a_child_created_after_the_cancel_escaped(
    rig: Rig,
) -> None:
    running = waits_to_be_stopped(rig, "DEV")
    parent = rig.new_task(sender="PM", recipient="DEV")
    thread = threading.Thread(target=lambda: rig.sh.run_session(parent))
    thread.start()
    assert running.wait(10)
    as_role(rig, "PM").cancel(parent, reason="stop the tree")
    # The parent's session delegated before its worker stopped it: this child was not there.
    late = child_of(rig, parent, "DEV", "QA")
    late_grandchild = child_of(rig, late, "QA", "OPS")
    thread.join(20)
    assert rig.task(late).cancel is None

    report = rig.reconcile()

    assert report.cascaded == 2
    for task_id in (late, late_grandchild):
        assert rig.task(task_id).bucket is Bucket.ARCHIVE
    [asked] = rig.events(late, EventKind.CANCEL_REQUESTED)
    assert (asked.by, asked.reason, asked.principal) == (
        "PM",
        f"parent {parent} cancelled: stop the tree",
        "pm-token",
    )
    assert asked.data["finished_by"] == "reconciler"
    assert rig.reconcile().cascaded == 0


# -- dependencies that will never be done -------------------------------------------------------


def test_a_cancelled_dependency_holds_its_dependant_for_its_approver(rig: Rig) -> None:
    dev = rig.new_task(sender="PM", recipient="DEV")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev])

    rig.sh.cancel(dev, reason="wrong approach")

    held = rig.task(qa)
    assert held.bucket is Bucket.INBOX
    assert held.hold is not None
    assert held.hold.dependency == dev
    assert f"dependency {dev} was cancelled (wrong approach)" in held.hold.reason
    assert claim(rig.services, qa, worker="w", message_id=None) is None
    assert dispatch.waiting_note(rig.services, held) == f"held for its approver: {held.hold.reason}"
    [hold] = rig.events(qa, EventKind.HOLD)
    assert hold.data == {"dependency": dev}
    assert dispatch.sweep(rig.services) == 0


def test_a_dependency_whose_session_is_being_stopped_holds_its_dependant_at_once(
    rig: Rig,
) -> None:
    running = waits_to_be_stopped(rig, "DEV")
    dev = rig.new_task(sender="PM", recipient="DEV")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev])
    thread = threading.Thread(target=lambda: rig.sh.run_session(dev))
    thread.start()
    assert running.wait(10)

    assert rig.sh.cancel(dev, reason="over budget").outcome == "stopping"

    hold = rig.task(qa).hold
    assert hold is not None
    assert hold.dependency == dev
    thread.join(20)
    assert rig.task(dev).bucket is Bucket.ARCHIVE
    assert len(rig.events(qa, EventKind.HOLD)) == 1  # the archive does not hold it twice


def test_an_archived_dependency_holds_its_dependant_and_the_approver_runs_it_anyway(
    rig: Rig,
) -> None:
    rig.sh.agent("DEV")(lambda ctx: "built")
    dev = rig.new_task(sender="PM", recipient="DEV")
    other = rig.new_task(sender="PM", recipient="OPS")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev, other])
    rig.sh.run_session(dev)
    rig.sh.transition(dev, "approve", actor="PM")  # done, but QA waits for OPS too
    rig.sh.transition(dev, "archive", actor="PM", reason="superseded")
    held = rig.task(qa)
    assert held.hold is not None
    assert held.hold.dependency == dev
    assert f"dependency {dev} was archived" in held.hold.reason

    with pytest.raises(NotAuthorized):
        as_role(rig, "QA").release_hold(qa)
    released = as_role(rig, "PM").release_hold(qa)

    assert released.hold is None
    assert dispatch.waiting_note(rig.services, released) == f"waiting for {other} (inbox)"
    assert claim(rig.services, qa, worker="w", message_id=None) is None  # OPS is not done
    rig.sh.agent("OPS")(lambda ctx: "deployed")
    rig.sh.run_session(other)
    rig.sh.transition(other, "approve", actor="PM")
    assert claim(rig.services, qa, worker="w", message_id=None) is not None
    [released_event] = rig.events(qa, EventKind.HOLD_RELEASED)
    assert (released_event.by, released_event.reason) == ("PM", f"run anyway without {dev}")


def test_released_with_its_other_dependencies_done_it_is_queued_at_once(rig: Rig) -> None:
    dev = rig.new_task(sender="PM", recipient="DEV")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev])
    rig.sh.cancel(dev, reason="not needed")
    with rig.store.snapshot() as connection:
        before = outbox.pending(connection)
    rig.sh.release_hold(qa)
    with rig.store.snapshot() as connection:
        assert outbox.pending(connection) == before + 1
    assert claim(rig.services, qa, worker="w", message_id=None) is not None


def test_the_approvers_other_choice_is_to_cancel_the_held_dependant(rig: Rig) -> None:
    dev = rig.new_task(sender="PM", recipient="DEV")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev])
    rig.sh.cancel(dev, reason="not needed")

    assert as_role(rig, "PM").cancel(qa, reason="without DEV there is nothing to test").outcome == (
        "archived"
    )
    task = rig.task(qa)
    assert (task.bucket, task.hold) == (Bucket.ARCHIVE, None)
    with pytest.raises(IllegalTransition):
        rig.sh.release_hold(qa)


def test_only_a_dependency_hold_is_released_this_way(rig: Rig) -> None:
    task_id = rig.new_task()
    with pytest.raises(IllegalTransition, match="not held by a dependency"):
        rig.sh.release_hold(task_id)


def test_a_parent_waiting_for_a_cancelled_child_is_woken_not_held(rig: Rig) -> None:
    parent = rig.new_task(sender="PM", recipient="PM")
    session = claim(rig.services, parent, worker="w", message_id=None)
    assert session is not None
    made = delegation.delegate(session, {"recipient": "DEV", "subject": "Build it", "key": "dev"})
    child = made.task_id
    assert child is not None
    assert delegation.wait_for(session, [child])["status"] == "waiting"

    rig.sh.cancel(child, reason="not needed any more")

    woken = rig.task(parent)
    assert (woken.bucket, woken.hold) == (Bucket.INBOX, None)
    assert dispatch.waiting_note(rig.services, woken) is None
    assert claim(rig.services, parent, worker="w2", message_id=None) is not None


# -- a held child is shown on its parent --------------------------------------------------------


def test_the_parents_show_and_page_list_its_held_children_and_tree(rig: Rig) -> None:
    parent = rig.new_task(sender="PM", recipient="DEV")
    dev = child_of(rig, parent, "DEV", "OPS")
    qa = child_of(rig, parent, "DEV", "QA", depends_on=[dev])
    grandchild = child_of(rig, qa, "QA", "OPS")
    rig.sh.cancel(dev, reason="wrong approach")
    reason = rig.task(qa).hold.reason  # type: ignore[union-attr]
    line = f"child {qa} held: {reason}"

    page = views.task_page(rig.sh, parent)
    assert page.held_children == [line]
    tree = [(n.task.task_id, n.depth, n.task.bucket) for n in page.children]
    assert sorted(tree) == sorted(
        [(dev, 1, Bucket.ARCHIVE), (qa, 1, Bucket.INBOX), (grandchild, 2, Bucket.INBOX)]
    )
    assert tree[tree.index((qa, 1, Bucket.INBOX)) + 1] == (grandchild, 2, Bucket.INBOX)

    env = {"SUREHAND_DATABASE_URL": rig.store.url, "SUREHAND_TENANT": rig.sh.tenant}
    shown = CliRunner().invoke(app, ["show", parent, "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["held_children"] == [line]
    assert [c["task_id"] for c in document["children"]] == [t for t, _, _ in tree]
    holds = {c["task_id"]: c["hold"] for c in document["children"]}
    assert holds[qa]["case_id"] == f"dependency:{dev}"
    assert (holds[dev], holds[grandchild]) == (None, None)
    text = CliRunner().invoke(app, ["show", parent], env={**env, "COLUMNS": "400"})
    assert f"child {qa} held:" in text.stdout


def test_a_cancelled_dependency_that_settles_done_before_its_stop_releases_its_dependant(
    rig: Rig,
) -> None:
    dev = rig.new_task(sender="PM", recipient="DEV")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev])
    session = claim(rig.services, dev, worker="w", message_id=None)
    assert session is not None
    assert rig.sh.cancel(dev, reason="too slow").outcome == "stopping"
    assert rig.task(qa).hold is not None

    session.settle("built just in time", to_review=False)  # before its stop watch

    assert rig.task(dev).bucket is Bucket.DONE
    released = rig.task(qa)
    assert released.hold is None
    assert [e.reason for e in rig.events(qa, EventKind.HOLD_RELEASED)] == [
        f"dependency {dev} is done after all"
    ]
    assert claim(rig.services, qa, worker="w", message_id=None) is not None


def test_two_dead_dependencies_keep_the_dependant_held_until_both_are_decided(rig: Rig) -> None:
    dev = rig.new_task(sender="PM", recipient="DEV")
    ops = rig.new_task(sender="PM", recipient="OPS")
    qa = rig.new_task(sender="PM", recipient="QA", depends_on=[dev, ops])
    session = claim(rig.services, dev, worker="w", message_id=None)
    assert session is not None
    rig.sh.cancel(dev, reason="too slow")
    rig.sh.cancel(ops, reason="not needed")
    session.settle("built", to_review=False)

    still = rig.task(qa).hold
    assert still is not None
    assert still.dependency == ops
    rig.sh.release_hold(qa, actor="PM")
    assert claim(rig.services, qa, worker="w", message_id=None) is not None
