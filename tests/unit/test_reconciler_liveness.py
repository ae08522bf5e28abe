"""A lease gone past its grace is judged lost only if no worker reports the job running.

The reconciler's last check before SESSION_LOST asks the workers (Celery ``inspect active`` in
deployment; injected here). A job a worker reports live is kept; if the workers cannot be asked,
nothing is judged lost in that pass rather than guessing."""

from __future__ import annotations

from collections.abc import Collection

from surehand.dispatcher.reconciler import Reconciler
from surehand.model import AttemptState
from tests.recovery_helpers import GRACE_SECONDS, Rig


def _past_grace(rig: Rig) -> tuple[str, str]:
    task_id, session = rig.interrupted()
    rig.reconcile()  # first sighting: suspected
    rig.clock.advance(GRACE_SECONDS)
    return task_id, session.attempt.attempt_id


def test_a_job_a_worker_reports_running_is_kept(rig: Rig) -> None:
    task_id, attempt_id = _past_grace(rig)
    reconciler = Reconciler(rig.sh.recovery, live_jobs=lambda: {task_id})

    report = reconciler.run_once()

    assert (report.lost, report.reported_live) == (0, 1)
    assert rig.attempt(attempt_id).state is AttemptState.RUNNING
    assert rig.cases_of(task_id) == []


def test_workers_that_cannot_be_asked_postpone_the_judgement(rig: Rig) -> None:
    _, attempt_id = _past_grace(rig)

    def unreachable() -> Collection[str]:
        raise TimeoutError("no reply from the broker")

    report = Reconciler(rig.sh.recovery, live_jobs=unreachable).run_once()

    assert report.lost == 0
    assert rig.attempt(attempt_id).state is AttemptState.RUNNING


def test_a_job_no_worker_reports_is_lost(rig: Rig) -> None:
    task_id, attempt_id = _past_grace(rig)

    report = Reconciler(rig.sh.recovery, live_jobs=lambda: {"TASK-20000101-001"}).run_once()

    assert report.lost == 1
    assert rig.attempt(attempt_id).state is AttemptState.SESSION_LOST
    assert len(rig.cases_of(task_id)) == 1
