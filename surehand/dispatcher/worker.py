"""Celery task bodies: ``surehand.run_session`` and ``surehand.reconcile``.

They live here, not in ``surehand.queue``, because they call the service layer; the queue
package stays pure transport. Both are thin: all logic is in the runner and the reconciler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from surehand.dispatcher.reconciler import Reconciler
from surehand.dispatcher.runner import SessionRunner
from surehand.queue.celery_app import SESSION_TASK_NAME

RECONCILE_TASK_NAME = "surehand.reconcile"


def register_tasks(
    app: Celery,
    runner: Callable[[], SessionRunner],
    reconciler: Callable[[], Reconciler],
    *,
    reconcile_every: float,
) -> None:
    """Register the session and reconcile tasks on ``app`` and schedule the reconciler."""

    @app.task(name=SESSION_TASK_NAME, bind=True, acks_late=False, ignore_result=True, shared=False)
    def run_session(self: Task[Any, Any], task_id: str) -> dict[str, Any]:
        # The return value travels in the task-succeeded event, so Flower shows the attempt
        # number and how the session ended next to the TASK id (the task's only argument).
        return runner().run(task_id, message_id=self.request.id).to_dict()

    @app.task(name=RECONCILE_TASK_NAME, ignore_result=True, shared=False)
    def reconcile() -> dict[str, object]:
        return reconciler().run_once().to_dict()

    app.conf.beat_schedule = {
        "surehand-reconcile": {"task": RECONCILE_TASK_NAME, "schedule": reconcile_every}
    }
