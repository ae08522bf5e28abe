"""Stopping the long-running doors as a person does: Ctrl-C of ``surehand up`` while a session
runs says what it waits for and that a second Ctrl-C stops now; ``mcp --transport http`` says
where it listens; ``api`` prints its URL only once bound and names the port when it is taken."""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from tests.procs import Proc, free_port, spawn, wait_until
from tests.shutdown_agents import RELEASE_ENV

pytestmark = pytest.mark.slow

EXIT_INTERRUPTED = 130
EMBEDDED = {"SUREHAND_EMBEDDED": "1"}  # api without a shared broker and Redis (a trial)
READY = ('"event": "ready"', "probes ")  # --json, or the last line of the banner


def _events(proc: Proc) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.output().splitlines() if line.startswith("{")]


def _up(home: Path, *args: str) -> Proc:
    env = {
        "SUREHAND_HOME": str(home),
        "SUREHAND_AGENTS": "DEV=tests.shutdown_agents:held",
        RELEASE_ENV: str(home / "release"),
    }
    proc = spawn(["up", "--no-api", *args], env, home / "up.log")
    try:
        wait_until(
            lambda: proc.returncode is not None or any(w in proc.output() for w in READY),
            timeout=60,
            what="surehand up to start",
        )
        assert proc.returncode is None, proc.output()
    except BaseException:
        proc.kill()  # a failed start must not leave `up` running
        raise
    return proc


def _active_task(home: Path) -> str:
    """Submit a TASK to DEV and wait until its session runs (held by the agent)."""
    with Surehand(database_url=f"sqlite:///{home / 'surehand.sqlite3'}") as sh:
        task_id = str(sh.write_task(sender="PM", recipient="DEV", subject="Held").task_id)
        wait_until(lambda: sh.get_task(task_id).bucket.value == "active", timeout=30)
    return task_id


def test_up_says_which_sessions_it_waits_for_then_stops_cleanly(tmp_path: Path) -> None:
    home = tmp_path
    proc = _up(home, "--json")
    try:
        task_id = _active_task(home)
        proc.process.send_signal(signal.SIGINT)
        wait_until(
            lambda: any(e.get("event") == "stopping" for e in _events(proc)),
            timeout=30,
            what="the stopping event",
        )
        stopping = next(e for e in _events(proc) if e.get("event") == "stopping")
        assert stopping["running"] == [task_id]
        assert proc.returncode is None  # still waiting for the session
        (home / "release").touch()
        assert proc.process.wait(timeout=60) == 0, proc.output()
    finally:
        proc.kill()
    stops = [e for e in _events(proc) if e.get("event") == "stopping"]
    assert stops[-1]["running"] == []
    assert _events(proc)[-1] == {"event": "stopped", "exit_code": 0}


def test_up_second_ctrl_c_stops_now(tmp_path: Path) -> None:
    home = tmp_path
    proc = _up(home)
    try:
        task_id = _active_task(home)
        proc.process.send_signal(signal.SIGINT)
        expected = (
            f"stopping: waiting for 1 running session(s) ({task_id}); "
            "press Ctrl-C again to stop now"
        )
        wait_until(lambda: expected in proc.output(), timeout=30, what=expected)
        proc.process.send_signal(signal.SIGINT)
        assert proc.process.wait(timeout=30) == EXIT_INTERRUPTED
    finally:
        (home / "release").touch()
        proc.kill()


def test_mcp_http_says_where_it_listens(tmp_path: Path) -> None:
    port = free_port()
    env = {"SUREHAND_HOME": str(tmp_path), "SUREHAND_MCP_PORT": str(port)}
    proc = spawn(["mcp", "--transport", "http"], env, tmp_path / "mcp.log")
    try:
        line = f"listening on http://127.0.0.1:{port}/mcp"
        wait_until(
            lambda: line in proc.output() or proc.returncode is not None,
            timeout=60,
            what=line,
        )
        assert line in proc.output(), proc.output()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it does listen once it says so
    finally:
        proc.kill()


def test_api_on_a_taken_port_names_it_and_prints_no_url(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**EMBEDDED, "SUREHAND_HOME": str(tmp_path), "SUREHAND_API_PORT": str(port)}
        proc = spawn(["api"], env, tmp_path / "api.log")
        try:
            code = proc.process.wait(timeout=60)
        finally:
            proc.kill()  # no-op once it exited
    output = proc.output()
    assert code != 0, output
    assert f"port {port}" in output, output
    assert "SUREHAND_API_PORT" in output, output
    assert f"http://127.0.0.1:{port}" not in output, output  # no URL: it never served


def test_api_prints_its_url_once_bound(tmp_path: Path) -> None:
    port = free_port()
    env = {**EMBEDDED, "SUREHAND_HOME": str(tmp_path), "SUREHAND_API_PORT": str(port)}
    proc = spawn(["api"], env, tmp_path / "api.log")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: url in proc.output() or proc.returncode is not None, timeout=60, what=url
        )
        assert url in proc.output(), proc.output()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        proc.kill()
