"""Publishing committed TASKs to the queue, and the sweep that publishes what was missed."""

from __future__ import annotations

import logging
from datetime import timedelta

from surehand.dispatcher.context import Services
from surehand.errors import PublishFailed
from surehand.model import Bucket
from surehand.store import tasks

log = logging.getLogger(__name__)


def _publish(services: Services, task_id: str, *buckets: Bucket) -> bool:
    """Publish ``run_session`` for a TASK that is in one of ``buckets`` and not held."""
    if services.publisher is None:
        return False
    with services.store.snapshot() as connection:
        task = tasks.get(connection, task_id)
    if task is None or task.bucket not in buckets or task.hold is not None:
        return False
    try:
        services.publisher(task)
    except PublishFailed:
        log.warning("publishing %s failed; the next sweep or reconciler pass retries", task_id)
        return False
    return True


def publish_after_commit(services: Services, task_id: str) -> bool:
    """Publish a committed TASK in ``inbox`` (or sent back to ``active`` for rework) and record
    that it was published.

    Runs after the creating transaction committed, never inside it: a publish that fails
    leaves the TASK unpublished in the store, and the dispatcher sweep retries it.
    """
    if not _publish(services, task_id, Bucket.INBOX, Bucket.ACTIVE):
        return False
    with services.store.transaction() as connection:
        tasks.set_published(connection, task_id, services.clock.now())
    return True


def publish_successor(services: Services, task_id: str) -> bool:
    """Publish ``run_session`` for an ``active`` TASK whose admission decided to re-execute.

    The worker's claim checks the decision again (revision fence), so an extra message is
    harmless; a missing one is published again by the next reconciler pass.
    """
    return _publish(services, task_id, Bucket.ACTIVE)


def sweep(services: Services, limit: int = 500) -> int:
    """Publish every TASK in ``inbox`` that was never published, or was published more than
    ``republish_after_seconds`` ago and is still unclaimed (its message was lost: a broker that
    lost its data, a worker that died between receiving and claiming). Returns how many."""
    if services.publisher is None:
        return 0
    cutoff = services.clock.now() - timedelta(seconds=services.settings.republish_after_seconds)
    with services.store.snapshot() as connection:
        pending = tasks.unpublished_inbox(connection, limit=limit, published_before=cutoff)
    return sum(publish_after_commit(services, task.task_id) for task in pending)
