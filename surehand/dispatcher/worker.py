"""Celery task bodies: ``surehand.run_session`` and ``surehand.reconcile``.

They live here, not in ``surehand.queue``, because they call the service layer; the queue
package stays pure transport. Both are thin: all logic is in the runner and the reconciler.

The tasks are instances registered on one app (``app.register_task``), not ``@app.task``
closures: Celery applies decorated tasks to every app created later in the process, which
would hand a second ``Surehand`` the first one's session task, bound to another store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, Task, signals
from celery.worker import state as worker_state

from surehand import metrics, metrics_port
from surehand.agents import groups
from surehand.dispatcher.reconciler import Reconciler
from surehand.dispatcher.runner import SessionRunner
from surehand.errors import NoSpaceForSessions, StoreUnavailable
from surehand.queue.celery_app import SESSION_TASK_NAME

RECONCILE_TASK_NAME = "surehand.reconcile"
log = logging.getLogger(__name__)


CLAIM_RETRY_SECONDS = 5.0


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
        try:
            return self._runner().run(task_id, message_id=self.request.id).to_dict()
        except StoreUnavailable as error:
            # The claim could not reach the store past its retries. The message was acked
            # early: publish it again, or the TASK would wait for the sweep's republish.
            raise self.retry(exc=error, countdown=CLAIM_RETRY_SECONDS) from error
        except NoSpaceForSessions as error:
            # Nothing was claimed: the TASK waits in inbox. Its message goes back to the
            # queue, for this worker once it has room again or for another one, as often as
            # it takes (the sweep also republishes a TASK left in inbox).
            log.warning("%s not started: %s", task_id, error)
            wait = self._runner().services.settings.work_dir_retry_seconds
            raise self.retry(exc=error, countdown=wait, max_retries=None) from error


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
    connect_shutdown_hooks()
    metrics.connect_celery_signals()  # sessions counted by outcome
    metrics_port.serve_when_ready()  # SUREHAND_METRICS_PORT, if set
    app.register_task(SessionTask(runner))
    app.register_task(ReconcileTask(reconciler))
    app.conf.beat_schedule = {
        "surehand-reconcile": {"task": RECONCILE_TASK_NAME, "schedule": reconcile_every}
    }


def connect_shutdown_hooks() -> None:
    """Stop command agents' process groups when a worker shuts down cold (idempotent).

    A warm shutdown lets running sessions finish, command agents included. A cold one cancels
    them: their groups get SIGTERM, then SIGKILL after the stop grace, and each session ends
    interrupted (the reconciler takes it over), so the pool's threads can end. Whatever is left
    when the worker has stopped is stopped the same way; SIGKILL of the worker is the
    trampoline's job (``surehand.agents.reaper``).
    """
    signals.worker_ready.connect(_watch_cold_shutdown, weak=False, dispatch_uid=_WATCH)
    signals.worker_shutdown.connect(_on_shutdown, weak=False, dispatch_uid=_STOP)


_WATCH = "surehand.agent-groups.watch"
_STOP = "surehand.agent-groups.stop"
_COLD_POLL_SECONDS = 0.2
_watch_lock = threading.Lock()
_watching = False


def _watch_cold_shutdown(**_: Any) -> None:
    # Celery's cold-shutdown handler cancels running tasks through the pool, which the threads
    # pool cannot do (it raises before Celery's worker_shutting_down signal is even sent): the
    # flag it sets, worker.state.should_terminate, is the one reliable sign. Polled, because
    # stopping takes up to the grace and must not run inside Celery's signal handler.
    global _watching
    with _watch_lock:
        if _watching:  # one watcher per process, however many workers it starts
            return
        _watching = True
    threading.Thread(target=_stop_when_cold, name="surehand-cold-shutdown", daemon=True).start()


def _stop_when_cold() -> None:
    while not worker_state.should_terminate:
        time.sleep(_COLD_POLL_SECONDS)
    groups.stop_all()


def _on_shutdown(**_: Any) -> None:
    groups.stop_all()
