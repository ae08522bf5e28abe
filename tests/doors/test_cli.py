"""Every ``surehand`` command in a subprocess, the way scripts use it: ``--json`` parsed back,
exit codes that mean something, long-running commands started and stopped with signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import typer.main
from typer.testing import CliRunner

from surehand.agents.context import SessionContext, SessionPort
from surehand.cli import app
from surehand.dispatcher.claims import claim
from surehand.facade import Surehand
from surehand.mcp.session_server import SessionMcp
from surehand.store import Store
from tests.conftest import PG_URL, REDIS_URL, require, truncate
from tests.procs import SUREHAND, free_port, private_redis, spawn, start_worker, wait_until
from tests.shared.cli import EXIT_CONFLICT, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_REFUSED, SUBMIT, Cli


def commands() -> Iterator[tuple[str, Any]]:
    """Every (sub)command of the typer app (typer ships its own click: duck-typed here)."""
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        for sub, leaf in getattr(command, "commands", {}).items():
            yield f"{name} {sub}", leaf
        if not hasattr(command, "commands"):
            yield name, command


def test_every_option_names_its_environment_variable() -> None:
    missing = [
        f"{name} {param.opts[0]}"
        for name, command in commands()
        for param in command.params
        if param.param_type_name == "option" and param.name != "help" and not param.envvar
    ]
    assert missing == []
    names = {name for name, _ in commands()}
    assert {"up", "api", "mcp", "check", "flower", "worker", "beat", "submit"} <= names


def test_help_shows_env_vars(cli: Cli) -> None:
    shown = cli("up", "--help", env={"COLUMNS": "200"}).stdout
    assert "SUREHAND_API_PORT" in shown
    assert "SUREHAND_UP_DEMO" in shown


def test_task_commands_with_json_and_exit_codes(cli: Cli) -> None:
    created = cli.json(*SUBMIT, "--id", "fix-1")
    assert created["disposition"] == "created"
    task_id = created["task_id"]
    assert cli.json(*SUBMIT, "--id", "fix-1")["disposition"] == "reused"
    conflict = cli.json(*SUBMIT[:-1], "Other", "--id", "fix-1", code=EXIT_CONFLICT)
    assert conflict["conflict"]["code"] == "digest_mismatch"
    invalid = cli.json(
        "submit", "--sender", "pm", "--recipient", "DEV", "--subject", "x", code=EXIT_INVALID
    )
    assert invalid["error"]["field"] == "sender"
    assert [t["task_id"] for t in cli.json("tasks", "--bucket", "inbox")] == [task_id]
    assert cli.json("diagnose", "fix-1")["state"] == "committed"
    assert cli.json("show", "TASK-20200101-001", code=EXIT_NOT_FOUND)["error"]["code"] == (
        "task_not_found"
    )

    assert cli.json("move", task_id, "claim", "--actor", "DEV")["bucket"] == "active"
    report = cli.json("report", task_id, "--reporter", "DEV", "--body", "Fixed.")
    assert report["deduplicated"] is False
    assert cli.json("move", task_id, "submit", "--actor", "DEV")["bucket"] == "review"
    refused = cli.json("move", task_id, "approve", "--actor", "DEV", code=EXIT_REFUSED)
    assert refused["error"]["code"] == "not_authorized"
    assert cli.json("move", task_id, "approve", "--actor", "PM")["bucket"] == "done"
    shown = cli.json("show", task_id)
    assert shown["task"]["bucket"] == "done"
    assert [r["body"] for r in shown["reports"]] == ["Fixed."]
    assert "Fixed." in cli("show", task_id, env={"COLUMNS": "200"}).stdout  # the human view

    watched = cli("tasks", "--watch", "--task", task_id, "--until-bucket", "done", "--json")
    assert json.loads(watched.stdout.splitlines()[-1])["reached"] == "done"
    timed_out = cli(
        "tasks",
        "--watch",
        "--task",
        task_id,
        "--until-bucket",
        "review",
        "--timeout",
        "0.3",
        "--interval",
        "0.1",
        code=124,
    )
    assert "timed out" in timed_out.stderr


def test_recovery_commands(cli: Cli) -> None:
    task_id = cli.json(*SUBMIT, "--id", "rec-1")["task_id"]
    assert cli.json("recover", task_id, "--actor", "PM")["admission"] == "not_admitted"
    assert cli.json("cases") == []
    missing = cli.json(
        "review",
        "CASE-20200101-001-1",
        "--effect",
        "absent",
        "--note",
        "x",
        "--actor",
        "PM",
        code=EXIT_NOT_FOUND,
    )
    assert missing["error"]["code"] == "case_not_found"
    assert cli.json("reconcile", "--embedded")["running"] == 0


def test_admin_commands(cli: Cli, tmp_path: Path) -> None:
    upgraded = cli.json("db", "upgrade")
    assert cli.json("db", "current") == {
        "current": upgraded["revision"],
        "head": upgraded["revision"],
        "up_to_date": True,
    }
    cli.json(*SUBMIT, "--id", "exp-1")
    exported = cli.json("fcop", "export", str(tmp_path / "workspace"))
    assert exported["tasks"] == 1
    assert list((tmp_path / "workspace" / "fcop" / "_lifecycle" / "inbox").iterdir())


def test_a_second_db_upgrade_finds_the_work_done(cli: Cli) -> None:
    cli.json("db", "upgrade")
    again = cli.json("db", "upgrade")
    assert (again["applied"], again["previous"]) == (False, again["revision"])
    assert "done already" in cli("db", "upgrade").stdout


def test_effect_runs_inside_a_session_only_through_its_session_server(cli: Cli) -> None:
    outside = cli("effect", "--name", "echo", "--", "echo", "hi", code=EXIT_REFUSED)
    assert "SUREHAND_MCP_URL and SUREHAND_MCP_TOKEN" in outside.stderr
    sh = cli.sh
    task_id = str(sh.write_task(sender="PM", recipient="DEV", subject="x").task_id)
    session = claim(sh.services, task_id, worker="test", message_id=None)
    assert session is not None
    mcp = SessionMcp.shared(sh.services)
    ctx = SessionContext(
        task=session.task,
        attempt=session.attempt,
        port=cast(SessionPort, None),
        cancelled=threading.Event(),
    )
    grant = mcp.grant(ctx)
    # What a session's program has: its grant, no store URL (the CLI's own is not used).
    inside = {"SUREHAND_MCP_URL": grant.url, "SUREHAND_MCP_TOKEN": grant.token}
    args = ["effect", "--name", "echo", "--key", "k-1", "--policy", "keyed", "--", "echo", "hi"]
    try:
        assert cli(*args, env=inside).stdout.strip() == "hi"
        assert cli(*args, env=inside).stdout.strip() == "hi"  # recorded outcome, not run again
        mcp.revoke(grant)
        ended = cli(*args, env=inside, code=EXIT_REFUSED)
    finally:
        mcp.stop()
    assert "the session may have ended" in ended.stderr
    assert [op.state.value for op in sh.operations(task_id)] == ["succeeded"]


def test_check_fails_clearly_on_bad_urls(cli: Cli) -> None:
    bad = {
        "SUREHAND_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:1/none",
        "SUREHAND_REDIS_URL": "redis://127.0.0.1:1/0",
        "SUREHAND_BROKER_URL": "redis://127.0.0.1:1/0",
    }
    report = cli.json("check", code=1, env=bad)
    assert report["ok"] is False
    status = {item["name"]: item for item in report["checks"]}
    assert status["database"]["status"] == "fail"
    assert "SUREHAND_DATABASE_URL" in status["database"]["fix"]
    assert status["redis"]["status"] == "fail"
    assert status["broker"]["status"] == "fail"
    assert "not ready" in cli("check", code=1, env=bad).stdout


def test_check_embedded_defaults_pass(cli: Cli) -> None:
    cli("db", "upgrade")
    report = cli.json("check")
    assert report["ok"] is True
    assert {item["name"] for item in report["checks"]} == {
        "database",
        "migrations",
        "redis",
        "broker",
        "agents",  # none configured: `up` runs the demo agent
        "probes",  # the built-in ones, registered without settings
    }


@pytest.mark.slow
def test_check_passes_against_real_services(cli: Cli, tmp_path: Path, pg_url: str) -> None:
    require(REDIS_URL, "redis")
    with private_redis(tmp_path) as broker:
        env = {
            "SUREHAND_DATABASE_URL": pg_url,
            "SUREHAND_REDIS_URL": REDIS_URL,
            "SUREHAND_BROKER_URL": broker.url,
            "SUREHAND_AGENTS": "DEV=demo",  # a deployment has no default agent
        }
        cli("db", "upgrade", env=env)
        # This xdist worker's database holds earlier tests' TASKs (some waiting in inbox on
        # an old clock): check must judge an empty deployment.
        store = Store(pg_url)
        truncate(store)
        store.dispose()
        report = cli.json("check", env=env)
    assert report["ok"] is True, report
    assert {item["name"]: item["status"] for item in report["checks"]} == {
        "database": "ok",
        "migrations": "ok",
        "redis": "ok",
        "redis-lua": "ok",
        "broker": "ok",
        "agent DEV": "ok",
        "probes": "ok",  # the built-in ones
    }
    assert PG_URL


def test_network_doors_refuse_open_non_loopback(cli: Cli) -> None:
    for command in (["api"], ["up", "--no-api"], ["up"], ["mcp", "--transport", "http"]):
        host = ["--host", "0.0.0.0"]
        if command[0] == "up" and "--no-api" in command:
            continue  # nothing listens: nothing to refuse
        refused = cli(*command, *host, code=1)
        assert "SUREHAND_API_TOKENS" in refused.stderr


def test_flower_needs_a_shared_broker(cli: Cli) -> None:
    refused = cli("flower", code=1)
    assert "SUREHAND_BROKER_URL" in refused.stderr


@pytest.mark.slow
def test_api_mcp_worker_and_beat_start_and_stop(cli: Cli, tmp_path: Path) -> None:
    env = {"SUREHAND_DATABASE_URL": cli.env["SUREHAND_DATABASE_URL"]}
    port = free_port()
    api = spawn(["api", "--embedded", "--port", str(port)], env, tmp_path / "api.log")
    wait_until(lambda: _healthy(port) or api.returncode is not None, timeout=60, what="api")
    os.killpg(api.process.pid, signal.SIGINT)
    assert api.process.wait(timeout=30) == 0, api.output()

    mcp = subprocess.Popen(
        [*SUREHAND, "mcp"],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _out, err = mcp.communicate(input=b"", timeout=60)  # the host closes stdin: exit cleanly
    assert mcp.returncode == 0, err

    with private_redis(tmp_path) as broker:
        queue_env = {**env, "SUREHAND_BROKER_URL": broker.url, "SUREHAND_REDIS_URL": broker.url}
        metrics_port = free_port()
        worker_env = {
            **queue_env,
            "SUREHAND_AGENTS": "DEV=demo",
            "SUREHAND_METRICS_PORT": str(metrics_port),
        }
        worker = start_worker(worker_env, tmp_path / "w.log")
        scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        assert "surehand_sessions_total" in scraped
        os.killpg(worker.process.pid, signal.SIGTERM)
        assert worker.process.wait(timeout=60) == 0, worker.output()
        beat = spawn(["beat", "--loglevel", "info"], queue_env, tmp_path / "beat.log")
        wait_until(
            lambda: "beat: Starting" in beat.output() or beat.returncode is not None,
            timeout=60,
            what="beat",
        )
        os.killpg(beat.process.pid, signal.SIGTERM)
        assert beat.process.wait(timeout=30) == 0, beat.output()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_a_worker_keeps_its_database_pools_whatever_its_concurrency(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`surehand worker --concurrency 200` keeps SUREHAND_DATABASE_POOL_SIZE (default 10) per
    pool: sizing the pools to the concurrency let a 1,000-session worker fill Postgres'
    max_connections; its threads beyond the pool wait for a connection instead."""
    from surehand.cli import session_commands

    pools: list[list[int]] = []

    def stop_at_the_store(sh: Surehand, _what: str) -> None:
        engines = [sh.store.engine, sh.store.one_statement_engine]
        pools.append([engine.pool.size() for engine in engines])  # type: ignore[attr-defined]
        raise typer.Exit(0)

    monkeypatch.setattr(session_commands, "wait_for_store", stop_at_the_store)
    monkeypatch.setenv("SUREHAND_AGENTS", "DEV=demo")
    args = ["worker", "--roles", "DEV", "--concurrency", "200", "--embedded"]
    args += ["--database-url", store.url]
    assert CliRunner().invoke(app, args).exit_code == 0
    monkeypatch.setenv("SUREHAND_DATABASE_POOL_SIZE", "4")
    assert CliRunner().invoke(app, args).exit_code == 0
    assert pools == [[10, 10], [4, 4]]


@pytest.mark.parametrize("pool", ["gevent", "eventlet"])
def test_a_worker_refuses_a_pool_its_sessions_cannot_run_in(pool: str) -> None:
    # Under --pool gevent the worker took every message and ran no session: gevent needs its
    # monkey-patching before the store, Redis and Celery are imported (bench/scale/held.py).
    result = CliRunner().invoke(app, ["worker", "--roles", "DEV", "--pool", pool])
    assert result.exit_code != 0
    assert f"--pool '{pool}' cannot run sessions here; use threads" in " ".join(
        result.output.split()
    )
