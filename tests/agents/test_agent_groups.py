"""Command agents die with their worker: real ``surehand worker`` processes on a private
redis-server broker run a command agent whose program starts a grandchild that ignores SIGTERM
and SIGHUP; killing or cold-stopping the worker must leave no process of the agent alive, and a
successor must never run beside one (DESIGN.md section 5). Each test runs in both sandbox
modes; the agent's processes are found from the host by a mark in their command lines."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from surehand.cli.common import EXIT_INTERRUPTED
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket
from surehand.store import Store
from tests.agent_procs import (
    TWO_ATTEMPTS_AGENT,
    TWO_ATTEMPTS_ENV,
    marked,
    require_proc,
    unique_seconds,
    wait_for_processes,
)
from tests.procs import Proc, RedisServer, running, spawn, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.up import env_for, events, run
from tests.shared.workers import worker_env

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Agent:
    """The two-attempts agent's worker environment and the mark of its processes."""

    env: dict[str, str]
    mark: str


@pytest.fixture(params=["bwrap", "none"])
def agent(
    store: Store, broker: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Agent:
    require_proc()
    script = tmp_path / "agent.sh"
    script.write_text(TWO_ATTEMPTS_AGENT, encoding="utf-8")
    mark = unique_seconds()
    env = worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=f"sh {script}",
        SUREHAND_LEASE_TTL_SECONDS="3",
        SUREHAND_AGENT_SANDBOX=str(request.param),
        AGENT_TEST_DIR=str(tmp_path),
        AGENT_MARK=mark,
    )
    return Agent(env, mark)


def started_agent(client: Surehand, tmp_path: Path, worker: Proc, mark: str) -> str:
    """Submit a TASK for DEV and wait until attempt 1's program runs; its task id."""
    created = client.write_task(
        sender="PM", recipient="DEV", subject="Work a long time", body="Keep working."
    )
    assert created.task_id is not None

    def started() -> bool:
        if worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
        return (tmp_path / "attempt1.started").exists()

    wait_until(started, timeout=60, what="the command agent to start")
    wait_for_processes(mark)
    return created.task_id


def gone(mark: str) -> bool:
    return marked(mark) == []


def test_sigkill_of_the_worker_kills_the_agents_processes_and_the_successor_runs_alone(
    agent: Agent, reconciling_client: Surehand, store: Store, tmp_path: Path
) -> None:
    with running(start_worker(agent.env, tmp_path / "worker-1.log")) as first:
        task_id = started_agent(reconciling_client, tmp_path, first, agent.mark)
        first.kill(signal.SIGKILL)

    wait_until(lambda: gone(agent.mark), timeout=30, what="attempt 1's processes to be gone")

    with running(start_worker(agent.env, tmp_path / "worker-2.log")) as second:

        def successor_started() -> bool:
            reconciling_client.reconciler.run_once()  # finds the lost session, admits attempt 2
            if second.returncode is not None:
                pytest.fail(f"the worker exited:\n{second.output()[-3000:]}")
            return (tmp_path / "attempt2.started").exists()

        wait_until(successor_started, timeout=90, interval=0.5, what="the successor to start")
        assert gone(agent.mark)  # nothing of attempt 1 runs beside attempt 2
        (tmp_path / "gate").touch()
        wait_until(
            lambda: read_task(store, task_id).bucket is Bucket.REVIEW,
            timeout=60,
            what="the successor to settle",
        )

    [report] = reports_of(store, task_id)
    assert report.body == "attempt 2"
    assert [a.number for a in attempts_of(store, task_id)] == [1, 2]


def test_a_cold_shutdown_stops_the_agents_processes_and_leaves_the_attempt_unfailed(
    agent: Agent, reconciling_client: Surehand, store: Store, tmp_path: Path
) -> None:
    with running(start_worker(agent.env, tmp_path / "worker.log")) as worker:
        task_id = started_agent(reconciling_client, tmp_path, worker, agent.mark)
        os.kill(worker.process.pid, signal.SIGQUIT)  # Celery's cold shutdown

        wait_until(lambda: gone(agent.mark), timeout=30, what="the agent's processes to stop")
        wait_until(lambda: worker.returncode is not None, timeout=30, what="the worker to exit")

    [attempt] = attempts_of(store, task_id)
    assert attempt.state is not AttemptState.FAILED, attempt.error  # interrupted, not failed
    assert read_task(store, task_id).bucket is Bucket.ACTIVE
    assert reports_of(store, task_id) == []


def test_a_second_ctrl_c_of_surehand_up_kills_the_agents_processes(tmp_path: Path) -> None:
    require_proc()
    files = tmp_path / "agent"  # not the surehand home (SUREHAND_HOME), which agents never see
    files.mkdir()
    script = files / "agent.sh"
    script.write_text(TWO_ATTEMPTS_AGENT, encoding="utf-8")
    mark = unique_seconds()
    env = {
        **env_for(tmp_path),
        "SUREHAND_AGENTS": "DEV=command",
        "SUREHAND_COMMAND_AGENT": f"sh {script}",
        "SUREHAND_AGENT_ENV": TWO_ATTEMPTS_ENV,
        "SUREHAND_AGENT_BIND": str(files),
        "AGENT_TEST_DIR": str(files),
        "AGENT_MARK": mark,
    }
    up = spawn(["up", "--json", "--no-api"], env, tmp_path / "up.log")
    with running(up):
        wait_until(lambda: any(e.get("event") == "ready" for e in events(up)), timeout=60)
        submitted = run(
            ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "Hi"], tmp_path
        )
        assert submitted.returncode == 0, submitted.stderr
        wait_until(
            (files / "attempt1.started").exists, timeout=60, what="the command agent to start"
        )
        wait_for_processes(mark)

        def ctrl_c() -> bool:  # once: stop after running sessions; twice: leave now
            os.kill(up.process.pid, signal.SIGINT)
            return up.process.poll() is not None

        wait_until(ctrl_c, timeout=30, interval=0.5, what="surehand up to exit")
        assert up.returncode == EXIT_INTERRUPTED

        wait_until(lambda: gone(mark), timeout=30, what="the agent's processes to be gone")
