"""``surehand.testing`` delivers what it says: a manual clock and an embedded instance a user's
own agent tests can run sessions on, then leave nothing behind."""

from __future__ import annotations

from pathlib import Path

from surehand.agents.context import SessionContext
from surehand.testing import ManualClock, embedded


def greeter(ctx: SessionContext) -> str:
    ctx.operation("greet", {"who": ctx.task.fields.subject}, lambda: "hello")
    return f"greeted {ctx.task.fields.subject}"


def test_an_embedded_instance_runs_a_users_agent_and_removes_its_directory() -> None:
    clock = ManualClock()
    with embedded(clock=clock) as sh:
        home = sh.settings.home
        sh.agent("DEV")(greeter)
        task_id = sh.write_task(sender="PM", recipient="DEV", subject="Ada").task_id
        assert task_id is not None

        assert sh.run_session(task_id).outcome == "settled"
        assert [report.body for report in sh.reports(task_id)] == ["greeted Ada"]
        assert [op.name for op in sh.operations(task_id)] == ["greet"]
        assert sh.get_task(task_id).created_at == clock.now()
    assert not home.exists()


def test_an_embedded_instance_in_a_given_directory_keeps_it(tmp_path: Path) -> None:
    with embedded(tmp_path, lease_ttl_seconds=5.0) as sh:
        assert sh.settings.lease_ttl_seconds == 5.0
        sh.write_task(sender="PM", recipient="DEV", subject="kept")
    assert (tmp_path / "surehand.sqlite3").exists()
