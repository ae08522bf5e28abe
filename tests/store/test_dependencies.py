"""Dependencies are enforced: a TASK whose ``depends_on`` are not all done is not claimable
(the claim's compare-and-set says so, not a publisher), nor published; the move that makes its
last dependency done queues it in the outbox in the same transaction, and the drain publishes
it; the sweep finds it too if that row was lost. Unknown ids are refused at creation, naming
``depends_on``; an archived dependency leaves it held for its approver, said by the doors.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from surehand.config import Settings
from surehand.dispatcher import actions, dispatch
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.errors import ValidationFailed
from surehand.model import Action, Bucket, EventKind, Task
from surehand.store import Store, outbox, task_moves, tasks
from surehand.store import schema as tables
from tests.procs import SUREHAND
from tests.session_helpers import claimed, committed_task, events_of, read_task, task_request
from tests.submission_helpers import Recording


def publishing(services: Services) -> tuple[Services, Recording]:
    recording = Recording()
    return replace(services, publisher=recording), recording


def finish(services: Services, task_id: str) -> Task:
    """Run ``task_id`` to done the way a worker does: claim, settle (no review)."""
    session = claimed(services, task_id)
    return session.settle("done", to_review=False)


def queued(services: Services) -> list[str]:
    with services.store.snapshot() as connection:
        return list(connection.execute(select(tables.outbox.c.task_id)).scalars())


def dev_then_qa(services: Services) -> tuple[str, str]:
    """A DEV TASK and a QA TASK that depends on it: their ids."""
    dev = committed_task(services, recipient="DEV")
    return dev, committed_task(services, recipient="QA", depends_on=[dev])


def test_a_task_waiting_for_its_dependency_is_refused_by_the_claim_and_not_published(
    services: Services,
) -> None:
    services, recording = publishing(services)
    dev, qa = dev_then_qa(services)
    assert recording.ids == [dev]  # the dependant's outbox row was drained, not published

    assert dispatch.sweep(services) == 0
    assert recording.ids == [dev]

    assert claim(services, qa, worker="w", message_id=None) is None
    assert read_task(services.store, qa).bucket is Bucket.INBOX
    refused = events_of(services.store, qa, EventKind.CLAIM_REFUSED)
    assert len(refused) == 1
    assert not read_task(services.store, qa).published


def test_the_doors_say_what_a_task_waits_for(services: Services) -> None:
    dev, qa = dev_then_qa(services)
    note = dispatch.waiting_note(services, read_task(services.store, qa))
    assert note == f"waiting for {dev} (inbox)"


def test_the_move_to_done_of_the_last_dependency_publishes_the_dependant(
    services: Services,
) -> None:
    services, recording = publishing(services)
    dev = committed_task(services, recipient="DEV")
    ops = committed_task(services, recipient="OPS")
    qa = committed_task(services, recipient="QA", depends_on=[dev, ops])

    finish(services, dev)
    dispatch.after_done(services, read_task(services.store, dev))
    assert qa not in recording.ids  # OPS is not done yet
    assert dispatch.waiting_note(services, read_task(services.store, qa)) == (
        f"waiting for {ops} (inbox)"
    )

    finish(services, ops)
    assert queued(services) == [qa]  # queued by the move's own transaction
    dispatch.after_done(services, read_task(services.store, ops))
    assert recording.ids.count(qa) == 1
    assert read_task(services.store, qa).published
    assert claimed(services, qa).task.bucket is Bucket.ACTIVE


def test_an_approval_to_done_publishes_the_dependant_through_the_service_action(
    services: Services,
) -> None:
    services, recording = publishing(services)
    dev, qa = dev_then_qa(services)
    claimed(services, dev).settle("ready for review", to_review=True)
    assert read_task(services.store, dev).bucket is Bucket.REVIEW
    assert qa not in recording.ids

    actions.transition(services, dev, Action.APPROVE, tenant="default", actor="PM")
    assert recording.ids.count(qa) == 1


def test_a_crash_between_the_move_and_the_publish_strands_nothing(services: Services) -> None:
    """The move committed (with the outbox row) and the process died before publishing: the
    next drain publishes the dependant. Had the drain that took the row died too, the sweep
    finds the ready, unpublished dependant."""
    dev, qa = dev_then_qa(services)
    with services.store.transaction() as connection:
        outbox.take(connection, 100)  # the creations' rows were drained
    finish(services, dev)  # no publisher: as if the process died right after the commit
    assert queued(services) == [qa]

    with services.store.transaction() as connection:
        outbox.take(connection, 100)  # a drain that took the row, then died
    restarted, recording = publishing(services)
    assert dispatch.sweep(restarted) == 1
    assert recording.ids == [qa]


def test_two_dependencies_done_at_once_queue_the_dependant_exactly_once(
    services: Services,
) -> None:
    dev = committed_task(services, recipient="DEV")
    ops = committed_task(services, recipient="OPS")
    qa = committed_task(services, recipient="QA", depends_on=[dev, ops])
    for task_id in (dev, ops):
        claimed(services, task_id).settle("ready", to_review=True)
    with services.store.transaction() as connection:
        outbox.take(connection, 100)  # the creations' rows were drained
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def approve(task_id: str) -> None:
        start.wait()
        try:
            actions.transition(services, task_id, Action.APPROVE, tenant="default", actor="PM")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=approve, args=(t,)) for t in (dev, ops)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert queued(services) == [qa]


def test_unknown_dependencies_are_refused_at_creation_naming_the_field(
    services: Services,
) -> None:
    with services.store.snapshot() as connection:
        before = tasks.count(connection)
    with pytest.raises(ValidationFailed) as refused:
        write_task(
            services,
            task_request(recipient="QA", depends_on=["TASK-20990101-001"]),
            tenant="default",
        )
    assert refused.value.field == "depends_on"
    assert "TASK-20990101-001" in refused.value.message
    with services.store.snapshot() as connection:
        assert tasks.count(connection) == before


def test_a_dependency_of_another_tenant_is_unknown(services: Services) -> None:
    theirs = write_task(services, task_request(), tenant="other").task_id
    assert theirs is not None
    with pytest.raises(ValidationFailed) as refused:
        write_task(services, task_request(depends_on=[theirs]), tenant="default")
    assert refused.value.field == "depends_on"


def test_a_task_cannot_depend_on_itself_so_no_cycle_can_form(services: Services) -> None:
    """A TASK's id is allocated after its dependencies are checked: guessing the next id names
    a TASK that does not exist yet, and is refused like any unknown id."""
    first = committed_task(services)
    day, number = first.rsplit("-", 1)
    guessed = f"{day}-{int(number) + 1:03d}"
    with pytest.raises(ValidationFailed):
        write_task(services, task_request(depends_on=[guessed]), tenant="default")
    with services.store.snapshot() as connection:
        assert tasks.get(connection, guessed) is None


def test_an_archived_dependency_leaves_the_dependant_held_for_its_approver(
    services: Services,
) -> None:
    services, recording = publishing(services)
    dev, qa = dev_then_qa(services)
    claimed(services, dev).settle("ready", to_review=True)
    actions.transition(services, dev, Action.APPROVE, tenant="default", actor="PM")
    # Archived before QA was claimed: QA may never run on it.
    with services.store.transaction() as connection:
        connection.execute(
            tables.outbox.delete()  # the release's message was lost with its publisher
        )
        task_moves.update_if(
            connection, qa, expect={}, values={"published": False}, now=services.clock.now()
        )
    actions.transition(
        services, dev, Action.ARCHIVE, tenant="default", actor="PM", reason="superseded"
    )
    recording.ids.clear()
    assert dispatch.sweep(services) == 0
    assert recording.ids == []
    note = dispatch.waiting_note(services, read_task(services.store, qa))
    assert note is not None
    assert note.startswith("held for its approver")
    assert dev in note

    assert claim(services, qa, worker="w", message_id=None) is None


def test_a_retry_of_a_create_with_dependencies_is_reused(services: Services) -> None:
    dev = committed_task(services, recipient="DEV")
    request = task_request(recipient="QA", depends_on=[dev])
    first = write_task(services, request, tenant="default")
    again = write_task(services, request, tenant="default")
    assert again.disposition.value == "reused"
    assert again.task_id == first.task_id
    with services.store.snapshot() as connection:
        rows = connection.execute(select(tables.task_dependencies)).all()
    assert [(r.dependency_id, r.task_id) for r in rows] == [(dev, first.task_id)]


def test_surehand_tasks_and_show_say_what_a_task_waits_for(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'surehand.sqlite3'}"
    store = Store(url)
    store.ensure_schema()
    local = Services(store=store, settings=Settings())
    dev = committed_task(local, recipient="DEV")
    qa = committed_task(local, recipient="QA", depends_on=[dev])
    store.dispose()
    env = {**os.environ, "SUREHAND_DATABASE_URL": url, "COLUMNS": "250"}
    env.pop("SUREHAND_BROKER_URL", None)

    def surehand(*args: str) -> str:
        done = subprocess.run(
            [*SUREHAND, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"waiting for {dev} (inbox)" in surehand("tasks")
    shown = json.loads(surehand("show", qa, "--json"))
    assert shown["dispatch_note"] == f"waiting for {dev} (inbox)"
    assert f"waiting for {dev}" in surehand("show", qa)
