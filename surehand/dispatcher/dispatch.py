"""Publishing committed TASKs to the queue, and the sweep that publishes what was missed.

**Outbox.** A created TASK is queued in the store's outbox by its creating transaction and
published after the commit by :func:`drain_outbox`: in the background
(:class:`~surehand.dispatcher.outbox_publisher.OutboxPublisher`, woken by the commit, in
``surehand api`` and ``surehand up``) or, in a process without one, by the creating call
itself. Each outbox row is taken by one drain; a drain that dies after taking rows leaves their
TASKs unpublished in ``inbox``, and :func:`sweep` publishes them.

**Containment.** A TASK that cannot be dispatched must never stop the dispatch of the others,
the reconciler, a restart of ``surehand up`` or the request that created it (DESIGN.md
section 5). A failure a retry would repeat (a recipient that is not a role code; any publisher
error other than the retryable ``PublishFailed``) marks the TASK instead (``dispatch_error``),
appends a ``dispatch_failed`` event when the reason is new, and counts
``surehand_dispatch_failures_total``. A marked TASK is tried again only after the back-off
(``republish_after_seconds``, as a lost message is), or when ``surehand up`` starts; a publish
that succeeds clears the mark. ``surehand tasks``/``show``/``check`` report marked TASKs, and
TASKs no worker has claimed for that long (:func:`unclaimed_roles`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from surehand import metrics
from surehand.dispatcher.context import Services
from surehand.errors import PublishFailed, SurehandError
from surehand.model import SYSTEM, Bucket, EventKind, Task
from surehand.roles import role_problem
from surehand.store import dependencies, events, outbox, task_publishing, tasks

log = logging.getLogger(__name__)

OUTBOX_BATCH = 100  # outbox rows one drain takes per transaction
MAX_ERROR = 1000  # characters of a publisher's error kept in dispatch_error
# The error is shown to the TASK's tenant (tasks, show, the API): never the credentials of a URL
# an exception message may quote ("redis://:secret@host" -> "redis://***@host").
_CREDENTIALS = re.compile(r"://[^/\s@]*@")


@dataclass(frozen=True)
class UnclaimedRole:
    """Unheld TASKs for ``role`` that sat in ``inbox`` longer than the threshold."""

    role: str
    count: int
    oldest_created_at: datetime


def back_off(services: Services) -> timedelta:
    """How long a marked TASK is left alone, and how long before unclaimed work is reported:
    the time after which the sweep also counts a published message as lost."""
    return timedelta(seconds=services.settings.republish_after_seconds)


def _try_publish(services: Services, task: Task) -> tuple[str, str] | None:
    """Publish ``task``; None when published, else (metric reason, error) of a failure a retry
    would repeat. ``PublishFailed`` (broker unreachable: retryable) propagates."""
    problem = role_problem(task.fields.recipient)
    if problem is not None:
        return "invalid_role", _invalid_role(task, problem)
    assert services.publisher is not None
    try:
        services.publisher(task)
    except PublishFailed:
        raise
    except Exception as exc:  # any other publisher error: contain it, never stop the sweep
        # The traceback only at DEBUG: its message may quote a URL with credentials (_mark
        # logs the redacted error).
        log.debug("publishing %s raised", task.task_id, exc_info=True)
        text = _CREDENTIALS.sub("://***@", f"{type(exc).__name__}: {exc}")
        return "publish_error", f"publishing failed: {text}"[:MAX_ERROR]
    return None


def _invalid_role(task: Task, problem: str) -> str:
    return f"invalid role code {task.fields.recipient!r}: {problem}"


def _mark(services: Services, task: Task, reason: str, error: str) -> None:
    """Record that ``task`` cannot be dispatched; one event per distinct error, not per try."""
    metrics.observe_dispatch_failure(reason)
    now = services.clock.now()
    with services.store.transaction() as connection:
        written = task_publishing.set_dispatch_error(connection, task, error, now)
        if written and task.dispatch_error != error:
            row = events.row(
                task_id=task.task_id,
                kind=EventKind.DISPATCH_FAILED,
                by=SYSTEM,
                at=now,
                reason=error,
                data={"recipient": task.fields.recipient, "reason": reason},
            )
            events.insert(connection, row)
    if task.dispatch_error != error:
        retry = now + back_off(services)
        log.error("%s cannot be dispatched (%s); tried again after %s", task.task_id, error, retry)


def _cleared(services: Services, task: Task) -> None:
    """A TASK marked before was published: drop the mark and say so in its history."""
    now = services.clock.now()
    with services.store.transaction() as connection:
        if not task_publishing.set_dispatch_error(connection, task, None, now):
            return
        events.insert(
            connection,
            events.row(
                task_id=task.task_id,
                kind=EventKind.PUBLISHED,
                by=SYSTEM,
                at=now,
                reason=f"dispatched after an earlier failure: {task.dispatch_error}",
            ),
        )


def _backing_off(services: Services, task: Task) -> bool:
    marked = task.dispatch_error_at
    return marked is not None and marked > services.clock.now() - back_off(services)


def _publish(services: Services, task_id: str, *buckets: Bucket, force: bool = False) -> bool:
    """Publish ``run_session`` for a TASK that is in one of ``buckets`` and not held; a TASK
    marked undispatchable is skipped during its back-off unless ``force``."""
    if services.publisher is None:
        return False
    with services.store.snapshot() as connection:
        task = tasks.get(connection, task_id)
        waiting = task is not None and task.bucket is Bucket.INBOX
        if waiting and not tasks.ready(connection, task_id):
            return False  # published when its last dependency is done (after_done)
    if task is None or task.bucket not in buckets or task.hold is not None:
        return False
    if not force and _backing_off(services, task):
        return False
    try:
        failure = _try_publish(services, task)
    except PublishFailed:
        metrics.observe_dispatch_failure("publish_failed")
        log.warning("publishing %s failed; the next sweep or reconciler pass retries", task_id)
        return False
    if failure is not None:
        _mark(services, task, *failure)
        return False
    if task.dispatch_error is not None:
        _cleared(services, task)
    return True


def _publish_recorded(services: Services, task_id: str, *, force: bool = False) -> bool:
    """Publish a TASK in ``inbox`` (or sent back to ``active`` for rework) and record that it
    was published. Store errors propagate."""
    if not _publish(services, task_id, Bucket.INBOX, Bucket.ACTIVE, force=force):
        return False
    # One UPDATE: in autocommit on Postgres (one round trip, as durable as a transaction).
    with services.store.one_write() as connection:
        task_publishing.set_published(connection, task_id, services.clock.now())
    return True


def publish_after_commit(services: Services, task_id: str) -> bool:
    """Publish a committed TASK in ``inbox`` (or sent back to ``active`` for rework) and record
    that it was published.

    Runs after the transaction that sent it there (a move back for rework) committed, never
    inside it, and never raises: the move is committed whatever happens here, so the call
    answers with its result (never a 500). A
    publish that fails leaves the TASK unpublished (or marked undispatchable) in the store, and
    the dispatcher sweep retries it.
    """
    try:
        return _publish_recorded(services, task_id)
    except SurehandError as error:  # the store went away after the commit
        log.warning("could not publish %s after its commit (%s); the sweep retries", task_id, error)
        return False


def after_create(services: Services, task_id: str) -> None:
    """After a TASK's creating commit (``submissions.write_task`` calls it for every create):
    wake the background publisher, or drain the outbox here when this process runs none.
    Never raises (the TASK is committed whatever happens)."""
    wake = services.wake_publisher
    if wake is not None and wake():
        return
    try:
        drain_outbox(services)
    except SurehandError as error:  # the store went away after the commit
        log.warning("could not publish %s after its commit (%s); the sweep retries", task_id, error)


def after_done(services: Services, task: Task) -> None:
    """After a move of ``task`` to done committed: the dependants it released were queued in
    the outbox by the move's transaction (``dependencies.release``); publish them now. Never
    raises; rows a crash leaves are drained by the sweep."""
    if task.bucket is Bucket.DONE:
        after_create(services, task.task_id)


def drain_outbox(services: Services, limit: int = OUTBOX_BATCH) -> int:
    """Publish the TASKs queued in the outbox, ``limit`` at a time, until it is empty (or the
    broker refuses). Returns how many were published. Store errors propagate.

    Each batch is taken (its rows deleted) in one transaction, published, then recorded
    published in one statement. Concurrent drains take disjoint rows."""
    if services.publisher is None:
        return 0
    published = 0
    while True:
        with services.store.transaction() as connection:
            taken = outbox.take(connection, limit)
            waiting = task_publishing.waiting_to_publish(connection, taken)
        done, refused = _publish_batch(services, waiting)
        published += done
        if refused or len(taken) < limit:
            return published


def _publish_batch(services: Services, waiting: list[Task]) -> tuple[int, bool]:
    """Publish ``waiting``; (how many were published, whether the broker refused)."""
    if services.publish_batch is None:
        done, refused = _publish_each(services, waiting)
    else:
        done, refused = _publish_together(services, waiting)
    if done:
        with services.store.one_write() as connection:
            task_publishing.set_published_many(connection, done, services.clock.now())
    return len(done), refused


def _publish_each(services: Services, waiting: list[Task]) -> tuple[list[str], bool]:
    """Publish ``waiting`` one by one; (ids published, whether the broker refused)."""
    done: list[str] = []
    for task in waiting:
        try:
            failure = _try_publish(services, task)
        except PublishFailed:  # broker unreachable: the sweep publishes the rest
            metrics.observe_dispatch_failure("publish_failed")
            log.warning("publishing %s failed; the next sweep retries", task.task_id)
            return done, True
        if failure is not None:
            _mark(services, task, *failure)
        else:
            done.append(task.task_id)
    return done, False


def _publish_together(services: Services, waiting: list[Task]) -> tuple[list[str], bool]:
    """Publish ``waiting`` in one batch (one broker round trip on Redis); TASKs whose role
    has no queue are marked. Any other error falls back to one by one, where it is contained
    per TASK as before."""
    assert services.publish_batch is not None
    sendable: list[Task] = []
    for task in waiting:
        problem = role_problem(task.fields.recipient)
        if problem is None:
            sendable.append(task)
        else:
            _mark(services, task, "invalid_role", _invalid_role(task, problem))
    if not sendable:
        return [], False
    try:
        services.publish_batch(sendable)
    except PublishFailed:  # some may have gone out: none is recorded, the sweep resends all
        metrics.observe_dispatch_failure("publish_failed")
        log.warning("publishing %d TASKs failed; the next sweep retries", len(sendable))
        return [], True
    except Exception:
        log.debug("publishing a batch raised; publishing one by one", exc_info=True)
        return _publish_each(services, sendable)
    return [task.task_id for task in sendable], False


def publish_successor(services: Services, task_id: str) -> bool:
    """Publish ``run_session`` for an ``active`` TASK whose admission decided to re-execute.

    The worker's claim checks the decision again (revision fence), so an extra message is
    harmless; a missing one is published again by the next reconciler pass.
    """
    return _publish(services, task_id, Bucket.ACTIVE)


def sweep(services: Services, limit: int = 500) -> int:
    """Drain the outbox (rows a crashed or broker-less process left), then publish every TASK
    in ``inbox`` that was never published, or was published more than
    ``republish_after_seconds`` ago and is still unclaimed (its message was lost: a broker that
    lost its data, a worker that died between receiving and claiming). TASKs marked
    undispatchable are tried again once their back-off passed. Returns how many were published.

    One TASK that cannot be dispatched never fails the sweep; store errors do (the caller's
    loop retries)."""
    if services.publisher is None:
        return 0
    drained = drain_outbox(services)
    cutoff = services.clock.now() - back_off(services)
    with services.store.snapshot() as connection:
        pending = task_publishing.unpublished_inbox(
            connection, limit=limit, published_before=cutoff, failed_before=cutoff
        )
    published = sum(_publish_recorded(services, task.task_id) for task in pending)
    with services.store.snapshot() as connection:
        metrics.observe_undispatchable(task_publishing.count_undispatchable(connection))
    return drained + published


def republish_inbox(services: Services) -> int:
    """Publish every unheld ``inbox`` TASK again, oldest first, marked ones included (a start
    of ``surehand up`` is when code or configuration may have changed). Returns how many."""
    with services.store.snapshot() as connection:
        waiting = tasks.list_tasks(
            connection, tenant=None, bucket=Bucket.INBOX, held=False, limit=100_000
        )
    return sum(_publish_recorded(services, task.task_id, force=True) for task in reversed(waiting))


def undispatchable(services: Services, tenant: str | None = None, limit: int = 100) -> list[Task]:
    """TASKs marked undispatchable (oldest mark first), for ``surehand check`` and the doors."""
    with services.store.snapshot() as connection:
        return task_publishing.undispatchable(connection, tenant=tenant, limit=limit)


def unclaimed_roles(services: Services, tenant: str | None = None) -> list[UnclaimedRole]:
    """Roles with unheld, dispatchable TASKs waiting in ``inbox`` longer than the back-off:
    after that long, no running worker serves the role (or all of its workers are busy)."""
    before = services.clock.now() - back_off(services)
    with services.store.snapshot() as connection:
        rows = task_publishing.unclaimed_by_role(connection, created_before=before, tenant=tenant)
    return [UnclaimedRole(role, count, oldest) for role, count, oldest in rows]


def waiting_note(services: Services, task: Task) -> str | None:
    """What a door should say about ``task``'s dispatch, or None when nothing is wrong."""
    if task.dispatch_error is not None:
        return f"undispatchable: {task.dispatch_error}"
    if task.hold is not None and task.hold.dependency is not None:
        return f"held for its approver: {task.hold.reason}"
    if task.bucket is Bucket.INBOX:  # its depends_on, or the children it waits for
        with services.store.snapshot() as connection:
            pending = dependencies.not_done(connection, [task.task_id]).get(task.task_id)
        if pending:
            return dependency_note(pending)
    waited = services.clock.now() - task.created_at
    if task.bucket is Bucket.INBOX and task.hold is None and waited > back_off(services):
        minutes = int(waited.total_seconds() // 60)
        role = task.fields.recipient
        return f"unclaimed for {minutes} min: no running worker serves role {role}, or all are busy"
    return None


def dependency_note(pending: list[tuple[str, str]]) -> str:
    """What a door says of a TASK whose dependencies ``pending`` [(id, bucket)] are not done:
    it waits for them, or (a dependency archived: it will never be done) it is held for its
    approver."""
    archived = [task_id for task_id, bucket in pending if bucket == Bucket.ARCHIVE.value]
    if archived:
        return (
            f"held for its approver: dependency {', '.join(archived)} was archived and will "
            "never be done, so this TASK is not dispatched"
        )
    return "waiting for " + ", ".join(f"{task_id} ({bucket})" for task_id, bucket in pending)
