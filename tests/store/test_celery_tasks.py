"""surehand's Celery tasks belong to the Surehand instance that registered them: two instances
in one process (tests, embedding applications) never run each other's sessions."""

from __future__ import annotations

from pathlib import Path

from surehand import Surehand
from surehand.agents.builtin import register_demo
from surehand.queue.celery_app import SESSION_TASK_NAME


def _instance(home: Path) -> Surehand:
    sh = Surehand(database_url=f"sqlite:///{home / 'db.sqlite3'}")
    register_demo(sh.registry)
    return sh


def test_each_instance_runs_sessions_against_its_own_store(tmp_path: Path) -> None:
    first, second = _instance(tmp_path / "a"), _instance(tmp_path / "b")
    first_app, second_app = first.celery, second.celery  # both register the same task names
    created = second.write_task(
        sender="PM", recipient="DEV", subject="only in the second store", client_submission_id="s"
    )
    assert created.task_id is not None

    outcome = second_app.tasks[SESSION_TASK_NAME].run(created.task_id)

    assert outcome["outcome"] == "settled"
    assert second.get_task(created.task_id).bucket.value == "review"
    assert first.list_tasks() == []
    assert first_app.tasks[SESSION_TASK_NAME] is not second_app.tasks[SESSION_TASK_NAME]
