"""``surehand up`` as a user runs it: one process on a temporary SQLite home, TASKs submitted
from other processes, watched with ``tasks --watch``, stopped with SIGINT/SIGTERM (exit 0).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from surehand.facade import Surehand
from surehand.store import task_publishing
from surehand.store.schema import tasks as tasks_table
from tests.procs import RedisServer, spawn, wait_until
from tests.shared.up import env_for, events, run, start_up, stop

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_up_runs_a_task_submitted_from_another_process(tmp_path: Path) -> None:
    proc, ready = start_up(tmp_path)
    try:
        assert ready["roles"] == ["DEV", "OPS", "QA"]
        submitted = run(
            [
                "submit",
                "--sender",
                "PM",
                "--recipient",
                "DEV",
                "--subject",
                "Hi",
                "--id",
                "s-1",
                "--json",
            ],
            tmp_path,
        )
        assert submitted.returncode == 0, submitted.stderr
        task_id = json.loads(submitted.stdout)["task_id"]
        watched = run(
            [
                "tasks",
                "--watch",
                "--task",
                task_id,
                "--until-bucket",
                "review",
                "--timeout",
                "30",
                "--interval",
                "0.2",
                "--json",
            ],
            tmp_path,
        )
        assert watched.returncode == 0, watched.stdout + watched.stderr
        assert json.loads(watched.stdout.splitlines()[-1])["reached"] == "review"
        shown = json.loads(run(["show", task_id, "--json"], tmp_path).stdout)
        assert [r["reporter"] for r in shown["reports"]] == ["DEV"]
        assert "Demo agent handled" in shown["reports"][0]["body"]
        assert [a["state"] for a in shown["attempts"]] == ["succeeded"]
        over_http = httpx.get(f"{ready['api']}/v1/tasks/{task_id}", timeout=10).json()
        assert over_http["bucket"] == "review"
    finally:
        code = stop(proc, signal.SIGINT)
    assert code == 0, proc.output()
    assert events(proc)[-1] == {"event": "stopped", "exit_code": 0}


def test_up_republishes_waiting_tasks_and_stops_on_sigterm(tmp_path: Path) -> None:
    """A TASK published into an earlier run's in-memory queue is run by the next ``up``."""
    sh = Surehand(database_url=f"sqlite:///{tmp_path / 'surehand.sqlite3'}")
    task_id = str(sh.write_task(sender="PM", recipient="QA", subject="Left over").task_id)
    with sh.store.transaction() as connection:
        task_publishing.set_published(connection, task_id, sh.services.clock.now())
    proc, _ready = start_up(tmp_path, "--no-api")
    try:
        wait_until(lambda: sh.get_task(task_id).bucket.value == "review", timeout=30)
    finally:
        code = stop(proc, signal.SIGTERM)
    assert code == 0, proc.output()


def test_up_restarts_next_to_an_undispatchable_task_and_runs_the_others(tmp_path: Path) -> None:
    """Issue 10, finding 4: one stored TASK the queue refused (LEAD-QA) made every start of
    ``up`` fail with "invalid role code". LEAD-QA is a role like any other now; a TASK whose
    recipient no rule accepts (older data) is marked and reported, and ``up`` still starts,
    runs the other TASKs, and starts again."""
    sh = Surehand(database_url=f"sqlite:///{tmp_path / 'surehand.sqlite3'}")
    normal, lead, bad = (
        str(sh.write_task(sender="PM", recipient=role, subject=f"For {role}").task_id)
        for role in ("QA", "LEAD-QA", "DEV")
    )
    with sh.store.transaction() as connection:
        connection.execute(
            update(tasks_table).where(tasks_table.c.task_id == bad).values(recipient="lead.qa")
        )
    agents = {"SUREHAND_AGENTS": "QA=demo,LEAD-QA=demo"}

    def reviewed() -> bool:
        return all(sh.get_task(t).bucket.value == "review" for t in (normal, lead))

    for run_number in (1, 2):
        proc, ready = start_up(tmp_path, "--no-api", env=agents)
        try:
            assert ready["roles"] == ["LEAD-QA", "QA"], ready
            wait_until(reviewed, timeout=60, what="the QA and LEAD-QA TASKs to reach review")
            marked = sh.get_task(bad)
            assert marked.dispatch_error is not None, run_number
            assert marked.dispatch_error.startswith("invalid role code 'lead.qa'")
        finally:
            code = stop(proc, signal.SIGTERM)
        assert code == 0, proc.output()
    shown = json.loads(run(["show", bad, "--json"], tmp_path).stdout)
    assert shown["dispatch_note"].startswith("undispatchable: invalid role code 'lead.qa'")
    assert [e["kind"] for e in shown["history"]].count("dispatch_failed") == 1
    sh.close()


def test_up_demo_follows_a_task_to_its_report(tmp_path: Path) -> None:
    done = run(["up", "--demo", "--json"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert kinds[0] == "ready"
    assert kinds[-2:] == ["report", "stopped"]
    buckets = [
        json.loads(line)["bucket"] for line in done.stdout.splitlines() if '"bucket"' in line
    ]
    assert buckets[-1] == "review"


def test_up_shows_its_redis_url_without_the_password(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password="s3cret-redis-password")
    server.start()
    env = {**env_for(tmp_path), "SUREHAND_REDIS_URL": server.url}
    try:
        proc, ready = start_up(tmp_path, env=env)
        stop(proc, signal.SIGTERM)
        text = spawn(["up"], env, tmp_path / "up-text.log")
        wait_until(lambda: "leases" in text.output(), timeout=60, what="the text banner")
        stop(text, signal.SIGTERM)
    finally:
        server.stop()

    assert ready["leases"] == f"redis://:***@127.0.0.1:{server.port}/0"
    assert f"leases      redis://:***@127.0.0.1:{server.port}/0" in text.output()
    assert "s3cret-redis-password" not in proc.output() + text.output()
