"""Command agents die with their worker: real ``surehand worker`` processes on a private
redis-server broker run a command agent whose program starts a grandchild that ignores SIGTERM
and SIGHUP; killing or cold-stopping the worker must leave no member of the agent's process
group alive, and a successor must never run beside one (DESIGN.md section 5)."""

# ruff: noqa: F811  (test functions take the fixtures imported below)

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from surehand.cli.common import EXIT_INTERRUPTED
from surehand.config import Settings
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket
from surehand.store import Store
from tests.agent_procs import TWO_ATTEMPTS_AGENT, group_of, live_members, require_proc
from tests.procs import Proc, RedisServer, running, spawn, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.test_up import env_for, events, run
from tests.test_workers import broker, lease_url, worker_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow


@pytest.fixture
def agent_env(store: Store, broker: RedisServer, tmp_path: Path) -> dict[str, str]:
    require_proc()
    script = tmp_path / "agent.sh"
    script.write_text(TWO_ATTEMPTS_AGENT, encoding="utf-8")
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=f"sh {script}",
        SUREHAND_LEASE_TTL_SECONDS="3",
        AGENT_TEST_DIR=str(tmp_path),
    )


@pytest.fixture
def reconciling_client(store: Store, broker: RedisServer) -> Iterator[Surehand]:
    """A handle on the workers' store, broker and leases that finds lost sessions at once."""
    settings = Settings.model_validate(
        {
            "database_url": store.url,
            "broker_url": broker.url,
            "redis_url": lease_url(broker),
            "lost_grace_seconds": 0.0,
        }
    )
    handle = Surehand(settings=settings)
    yield handle
    handle.close()


def started_agent(client: Surehand, tmp_path: Path, worker: Proc) -> tuple[str, int]:
    """Submit a TASK for DEV and wait until attempt 1's program runs: (task id, its group)."""
    created = client.write_task(
        sender="PM", recipient="DEV", subject="Work a long time", body="Keep working."
    )
    assert created.task_id is not None
    pids = tmp_path / "attempt1.pids"

    def started() -> bool:
        if worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
        return pids.exists()

    wait_until(started, timeout=60, what="the command agent to start")
    leader = int(pids.read_text().split()[0])
    group = group_of(leader)
    assert group not in {os.getpgrp(), group_of(worker.process.pid)}
    assert len(live_members(group)) >= 3  # trampoline, program, grandchild (and its sleep)
    return created.task_id, group


def test_sigkill_of_the_worker_kills_the_agents_whole_group_and_the_successor_runs_alone(
    agent_env: dict[str, str], reconciling_client: Surehand, store: Store, tmp_path: Path
) -> None:
    with running(start_worker(agent_env, tmp_path / "worker-1.log")) as first:
        task_id, group = started_agent(reconciling_client, tmp_path, first)
        first.kill(signal.SIGKILL)

    wait_until(lambda: not live_members(group), timeout=1.0, what=f"group {group} to be gone")

    with running(start_worker(agent_env, tmp_path / "worker-2.log")) as second:

        def successor_settled() -> bool:
            reconciling_client.reconciler.run_once()  # finds the lost session, admits attempt 2
            if second.returncode is not None:
                pytest.fail(f"the worker exited:\n{second.output()[-3000:]}")
            return read_task(store, task_id).bucket is Bucket.REVIEW

        wait_until(successor_settled, timeout=90, interval=0.5, what="the successor to settle")

    [report] = reports_of(store, task_id)
    assert report.body == "attempt 2; alive:"
    assert [a.number for a in attempts_of(store, task_id)] == [1, 2]


def test_a_cold_shutdown_stops_the_agents_group_and_leaves_the_attempt_unfailed(
    agent_env: dict[str, str], reconciling_client: Surehand, store: Store, tmp_path: Path
) -> None:
    with running(start_worker(agent_env, tmp_path / "worker.log")) as worker:
        task_id, group = started_agent(reconciling_client, tmp_path, worker)
        os.kill(worker.process.pid, signal.SIGQUIT)  # Celery's cold shutdown

        wait_until(lambda: not live_members(group), timeout=30, what=f"group {group} to stop")
        wait_until(lambda: worker.returncode is not None, timeout=30, what="the worker to exit")

    [attempt] = attempts_of(store, task_id)
    assert attempt.state is not AttemptState.FAILED, attempt.error  # interrupted, not failed
    assert read_task(store, task_id).bucket is Bucket.ACTIVE
    assert reports_of(store, task_id) == []


def test_a_second_ctrl_c_of_surehand_up_kills_the_agents_whole_group(tmp_path: Path) -> None:
    require_proc()
    script = tmp_path / "agent.sh"
    script.write_text(TWO_ATTEMPTS_AGENT, encoding="utf-8")
    env = {
        **env_for(tmp_path),
        "SUREHAND_AGENTS": "DEV=command",
        "SUREHAND_COMMAND_AGENT": f"sh {script}",
        "AGENT_TEST_DIR": str(tmp_path),
    }
    up = spawn(["up", "--json", "--no-api"], env, tmp_path / "up.log")
    with running(up):
        wait_until(lambda: any(e.get("event") == "ready" for e in events(up)), timeout=60)
        submitted = run(
            ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "Hi"], tmp_path
        )
        assert submitted.returncode == 0, submitted.stderr
        pids = tmp_path / "attempt1.pids"
        wait_until(pids.exists, timeout=60, what="the command agent to start")
        group = group_of(int(pids.read_text().split()[0]))

        def ctrl_c() -> bool:  # once: stop after running sessions; twice: leave now
            os.kill(up.process.pid, signal.SIGINT)
            return up.process.poll() is not None

        wait_until(ctrl_c, timeout=30, interval=0.5, what="surehand up to exit")
        assert up.returncode == EXIT_INTERRUPTED

        wait_until(lambda: not live_members(group), timeout=1.0, what=f"group {group} to be gone")
