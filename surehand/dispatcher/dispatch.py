"""Publishing committed TASKs to the queue, and the sweep that publishes what was missed."""

from __future__ import annotations

import logging

from surehand.dispatcher.context import Services
from surehand.errors import PublishFailed
from surehand.model import Bucket
from surehand.store import tasks

log = logging.getLogger(__name__)


def publish_after_commit(services: Services, task_id: str) -> bool:
    """Publish a ``run_session`` message for a committed TASK if a broker is configured.

    Runs after the creating transaction committed, never inside it: a publish that fails
    leaves the TASK unpublished in the store, and the dispatcher sweep retries it.
    """
    if services.publisher is None:
        return False
    with services.store.snapshot() as connection:
        task = tasks.get(connection, task_id)
    if task is None or task.bucket is not Bucket.INBOX or task.hold is not None:
        return False
    try:
        services.publisher(task)
    except PublishFailed:
        log.warning("publishing %s failed; the dispatcher sweep will retry", task_id)
        return False
    with services.store.transaction() as connection:
        tasks.set_published(connection, task_id, services.clock.now())
    return True


def sweep(services: Services, limit: int = 500) -> int:
    """Publish every unpublished TASK in ``inbox``; returns how many were published."""
    if services.publisher is None:
        return 0
    with services.store.snapshot() as connection:
        pending = tasks.unpublished_inbox(connection, limit=limit)
    return sum(publish_after_commit(services, task.task_id) for task in pending)


def publish_successor(services: Services, task_id: str) -> bool:
    """Publish ``run_session`` for a TASK whose successor admission decided to re-execute.

    The worker's claim checks the decision again (revision fence), so an extra message is
    harmless; a missing one is published again by the next reconciler pass.
    """
    if services.publisher is None:
        return False
    with services.store.snapshot() as connection:
        task = tasks.get(connection, task_id)
    if task is None or task.bucket is not Bucket.ACTIVE or task.hold is not None:
        return False
    try:
        services.publisher(task)
    except PublishFailed:
        log.warning("publishing the successor of %s failed; the reconciler will retry", task_id)
        return False
    return True
