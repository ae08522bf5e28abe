"""An LLM-like agent declares its effects over MCP inside real ``surehand worker`` sessions, and
the worker is SIGKILLed: an effect begun but not ended holds the TASK for review; an effect
ended before the kill is ``already_done`` for the successor, which is briefed on it, and the
ticket ledger the agent writes shows the effect once (seed 003)."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from surehand.facade import Surehand
from surehand.model import (
    Admission,
    AttemptState,
    Bucket,
    EffectFact,
    EventKind,
    OperationState,
)
from surehand.store import Store
from tests.procs import Proc, RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, events_of, operations_of, read_task, reports_of
from tests.shared.workers import worker_env

pytestmark = pytest.mark.slow

AGENT = Path(__file__).parents[1] / "mcp_agent.py"


def agent_env(store: Store, broker: RedisServer, tmp_path: Path, mode: str) -> dict[str, str]:
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=f"{sys.executable} {AGENT} {mode}",
        SUREHAND_LEASE_TTL_SECONDS="3",
        SUREHAND_AGENT_BIND=f"{tmp_path},{AGENT}:ro",  # the view has no tests of its own
        AGENT_TEST_DIR=str(tmp_path),
    )


def killed_at(client: Surehand, env: dict[str, str], tmp_path: Path, marker: str) -> str:
    """Submit a TASK, wait for the agent's ``marker`` in attempt 1, SIGKILL the worker."""
    with running(start_worker(env, tmp_path / "worker-1.log")) as worker:
        created = client.write_task(
            sender="PM", recipient="DEV", subject="Rotate the API keys", body="Open a ticket."
        )
        assert created.task_id is not None
        wait_until(
            lambda: _alive(worker) and (tmp_path / f"{marker}-1").exists(),
            timeout=90,
            what=f"the agent to reach {marker}",
        )
        worker.kill(signal.SIGKILL)
    return created.task_id


def _alive(worker: Proc) -> bool:
    if worker.returncode is not None:
        pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
    return True


def test_an_effect_begun_over_mcp_and_killed_in_the_middle_is_held_for_review(
    store: Store, broker: RedisServer, reconciling_client: Surehand, tmp_path: Path
) -> None:
    client = reconciling_client
    env = agent_env(store, broker, tmp_path, "hang_in_effect")
    task_id = killed_at(client, env, tmp_path, "in_effect")

    def held() -> bool:
        client.reconciler.run_once()
        return read_task(store, task_id).hold is not None

    wait_until(held, timeout=60, interval=0.5, what="the TASK to be held")

    [case] = client.cases()
    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    [op] = operations_of(store, task_id)
    assert (op.name, op.state) == ("ticket.create", OperationState.INTENT)
    assert read_task(store, task_id).bucket is Bucket.ACTIVE
    assert (tmp_path / "ledger.txt").read_text().count("created") == 1


def test_an_effect_ended_before_the_kill_is_already_done_for_the_briefed_successor(
    store: Store, broker: RedisServer, reconciling_client: Surehand, tmp_path: Path
) -> None:
    client = reconciling_client
    env = agent_env(store, broker, tmp_path, "hang_after_effect")
    task_id = killed_at(client, env, tmp_path, "after_effect")

    with running(start_worker(env, tmp_path / "worker-2.log")) as second:

        def settled() -> bool:
            client.reconciler.run_once()  # finds the lost session, admits attempt 2
            return _alive(second) and read_task(store, task_id).bucket is Bucket.REVIEW

        wait_until(settled, timeout=120, interval=0.5, what="the successor to settle")

    assert (tmp_path / "ledger.txt").read_text().splitlines() == [
        "created Rotate the API keys (attempt 1)"
    ]
    assert (tmp_path / "effect_already_done-2").exists()
    [report] = reports_of(store, task_id)
    assert report.body == "ticket already created: OPS-1"
    [op] = operations_of(store, task_id)
    assert (op.state, op.external_receipt, op.epoch) == (OperationState.SUCCEEDED, "OPS-1", 1)
    brief = json.loads((tmp_path / "brief-2.json").read_text())
    assert brief["recovering"] is True
    assert [(e["name"], e["status"], e["receipt"]) for e in brief["effects"]] == [
        ("ticket.create", "done", "OPS-1")
    ]
    [first, successor] = attempts_of(store, task_id)
    task_file = (Path(env["SUREHAND_WORK_DIR"]) / successor.attempt_id / "TASK.md").read_text()
    assert "## Recovery" in task_file
    assert '**done**: `"ticket.create"`' in task_file
    assert 'receipt `"OPS-1"`' in task_file
    assert "Do not repeat an effect listed as done" in task_file
    first_file = (Path(env["SUREHAND_WORK_DIR"]) / first.attempt_id / "TASK.md").read_text()
    assert "## Recovery" not in first_file


def agent_processes(marker: str) -> list[int]:
    """Pids of this host's processes whose command line contains ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if proc.name.isdigit() and marker in cmdline:
            found.append(int(proc.name))
    return found


@contextmanager
def keep_calling_agent(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> Iterator[tuple[Proc, str]]:
    """A worker running the hostile ``keep_calling`` agent on a new TASK, its program ready
    and waiting for the file ``go``: (the worker, the task id)."""
    env = agent_env(store, broker, tmp_path, f"keep_calling {tmp_path}")
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        created = client.write_task(
            sender="PM", recipient="DEV", subject="Rotate the API keys", body="Open a ticket."
        )
        assert created.task_id is not None
        wait_until(
            lambda: _alive(worker) and (tmp_path / "ready-1").exists(),
            timeout=90,
            what="the agent to be ready",
        )
        yield worker, created.task_id


def stopped_and_refused(worker: Proc, tmp_path: Path) -> httpx.Response:
    """Once the worker stopped the agent's program: what the agent's token gets now."""
    marker = f"{AGENT} keep_calling {tmp_path}"
    wait_until(
        lambda: _alive(worker) and not agent_processes(marker),
        timeout=90,
        what="the agent's program to be stopped",
    )
    grant = json.loads((tmp_path / "grant.json").read_text())
    return httpx.post(grant["url"], json={}, headers={"Authorization": f"Bearer {grant['token']}"})


def test_a_stale_agent_that_keeps_calling_is_stopped_and_its_token_revoked_after_one_event(
    store: Store, broker: RedisServer, reconciling_client: Surehand, tmp_path: Path
) -> None:
    client = reconciling_client
    with keep_calling_agent(store, broker, client, tmp_path) as (worker, task_id):
        [attempt] = attempts_of(store, task_id)
        # The reconciler judged the session lost (a paused worker): attempt 1 is stale now,
        # while its worker still holds the lease and its program still runs.
        client.recovery.lose(attempt, state=AttemptState.SESSION_LOST, by="test")
        assert agent_processes(f"{AGENT} keep_calling {tmp_path}")
        (tmp_path / "go").write_text("", encoding="utf-8")
        after = stopped_and_refused(worker, tmp_path)

    assert after.status_code == 401
    assert "stale_owner" in after.json()["error"]["message"]
    answers = (tmp_path / "answers.txt").read_text().splitlines()
    assert '"code": "stale_owner"' in answers[0]
    [fenced] = events_of(store, task_id, EventKind.STALE_OWNER_FENCED)
    assert fenced.attempt_id == attempt.attempt_id


def test_an_agent_whose_session_lost_its_lease_is_stopped_and_its_token_revoked(
    store: Store, broker: RedisServer, reconciling_client: Surehand, tmp_path: Path
) -> None:
    client = reconciling_client
    with keep_calling_agent(store, broker, client, tmp_path) as (worker, task_id):
        # The lease is gone (as after a Redis failover): the worker's next renewal finds it
        # lost and stops the program, which is deaf to SIGTERM and calls during the grace.
        client.leases.client.delete(client.leases.key(task_id))
        wait_until(
            lambda: f"lease for {task_id} attempt" in worker.output(),
            timeout=60,
            what="the worker to find its lease lost",
        )
        (tmp_path / "go").write_text("", encoding="utf-8")
        after = stopped_and_refused(worker, tmp_path)

    assert after.status_code == 401
    refusal = after.json()["error"]["message"]
    assert "lease_lost" in refusal
    assert "its token is revoked and its program stopped" in refusal
    answers = (tmp_path / "answers.txt").read_text().splitlines()
    assert '"code": "lease_lost"' in answers[0]
    assert operations_of(store, task_id) == []  # nothing it declared after the loss was kept
