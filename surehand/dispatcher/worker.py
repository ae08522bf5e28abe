"""Celery task bodies: ``surehand.run_session`` and ``surehand.reconcile``.

They live here, not in ``surehand.queue``, because they call the service layer; the queue
package stays pure transport. Both are thin: all logic is in the runner and the reconciler.

The tasks are instances registered on one app (``app.register_task``), not ``@app.task``
closures: Celery applies decorated tasks to every app created later in the process, which
would hand a second ``Surehand`` the first one's session task, bound to another store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from surehand.dispatcher.reconciler import Reconciler
from surehand.dispatcher.runner import SessionRunner
from surehand.queue.celery_app import SESSION_TASK_NAME

RECONCILE_TASK_NAME = "surehand.reconcile"


class SessionTask(Task):  # type: ignore[type-arg]
    """``surehand.run_session(task_id)``: claim and run one TASK."""

    name = SESSION_TASK_NAME
    acks_late = False  # early ack: recovery is the reconciler's job, not redelivery's
    ignore_result = True

    def __init__(self, runner: Callable[[], SessionRunner]) -> None:
        self._runner = runner

    def run(self, task_id: str) -> dict[str, Any]:
        # The return value travels in the task-succeeded event, so Flower shows the attempt
        # number and how the session ended next to the TASK id (the task's only argument).
        return self._runner().run(task_id, message_id=self.request.id).to_dict()


class ReconcileTask(Task):  # type: ignore[type-arg]
    """``surehand.reconcile()``: one reconciler pass (scheduled by beat)."""

    name = RECONCILE_TASK_NAME
    ignore_result = True

    def __init__(self, reconciler: Callable[[], Reconciler]) -> None:
        self._reconciler = reconciler

    def run(self) -> dict[str, object]:
        return self._reconciler().run_once().to_dict()


def register_tasks(
    app: Celery,
    runner: Callable[[], SessionRunner],
    reconciler: Callable[[], Reconciler],
    *,
    reconcile_every: float,
) -> None:
    """Register the session and reconcile tasks on ``app`` and schedule the reconciler."""
    app.register_task(SessionTask(runner))
    app.register_task(ReconcileTask(reconciler))
    app.conf.beat_schedule = {
        "surehand-reconcile": {"task": RECONCILE_TASK_NAME, "schedule": reconcile_every}
    }
