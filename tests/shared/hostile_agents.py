"""What other test modules need from ``tests/agents/test_hostile_agents.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import Bucket
from surehand.store import Store
from surehand.store.engine import sqlite_file
from tests.agent_procs import require_proc
from tests.procs import Proc, RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.marks import marked
from tests.shared.workers import worker_env
from tests.skips import not_applicable

AGENT = Path(__file__).parents[1] / "hostile_agent.py"


SECRETS = {
    "SUREHAND_API_TOKENS": "SECRET-admin-token-0123456789abcdef=ops:ADMIN:default",
    "SUREHAND_METRICS_TOKEN": "SECRET-metrics-token-0123456789abcdef",
}


MEMORY_MIB = 256


@dataclass
class Deployment:
    """A worker whose DEV agent is the hostile program, and a handle on its store."""

    mode: str
    client: Surehand
    worker: Proc
    tmp_path: Path
    store: Store

    def submit(self, probe: str, **params: Any) -> str:
        body = "HOSTILE " + json.dumps({"probe": probe, **params})
        created = self.client.write_task(
            sender="PM", recipient="DEV", subject=f"probe {probe}", body=body
        )
        assert created.task_id is not None
        return created.task_id

    def finished(self, task_id: str) -> bool:
        """Settled in review, or held for its approver (a case decided by admission)."""
        self.client.reconciler.run_once()
        if self.worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{self.worker.output()[-3000:]}")
        task = read_task(self.store, task_id)
        return task.bucket is Bucket.REVIEW or task.hold is not None

    def run(self, probe: str, **params: Any) -> str:
        task_id = self.submit(probe, **params)
        wait_until(lambda: self.finished(task_id), timeout=90, what=f"probe {probe} to finish")
        return task_id

    def findings(self, task_id: str) -> dict[str, Any]:
        reports = reports_of(self.store, task_id)
        if len(reports) != 1:
            errors = [attempt.error for attempt in attempts_of(self.store, task_id)]
            pytest.fail(f"{task_id} has {len(reports)} REPORTs; its attempts ended: {errors}")
        return dict(json.loads(reports[0].body))

    def worker_rss_mib(self) -> float:
        status = Path(f"/proc/{self.worker.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024


def hostile_env(
    store: Store, broker: RedisServer, tmp_path: Path, mode: str, **extra: str
) -> dict[str, str]:
    """A worker whose DEV agent is the hostile program (a stand-in ``codex`` on PATH), in
    sandbox ``mode``; with ``extra`` settings."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text(f'#!/bin/sh\nexec {sys.executable} {AGENT} "$@"\n')
    (bin_dir / "codex").chmod(0o755)
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT="codex",
        SUREHAND_AGENT_SANDBOX=mode,
        SUREHAND_CODEX_SANDBOX="danger-full-access",  # a stand-in: no helpers under /tmp
        SUREHAND_AGENT_BIND=f"{bin_dir}:ro,{AGENT.parent}:ro",  # the probes; nothing of tmp_path
        SUREHAND_CONCURRENCY="4",
        PATH=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        **extra,
    )


@pytest.fixture(params=["bwrap", "none"])
def hostile_deployment(
    request: pytest.FixtureRequest,
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
) -> Iterator[Deployment]:
    require_proc()
    if request.param == "none" and sqlite_file(store.url) is None:
        # Not applicable: what the fallback cannot hide does not depend on the store (its
        # answers that do -- the session tools' -- are asserted with bwrap on both stores).
        not_applicable("the fallback's limits are the same on every store")
    (tmp_path / "secret.txt").write_text("SECRET of the host")
    env = hostile_env(
        store,
        broker,
        tmp_path,
        str(request.param),
        SUREHAND_AGENT_ENV="OPENAI_API_KEY",
        SUREHAND_AGENT_MEMORY_MIB=str(MEMORY_MIB),
        OPENAI_API_KEY="sk-allowed-by-the-operator",
        **SECRETS,
        **marked(request, "hostile_settings"),
    )
    with running(start_worker(env, tmp_path / "worker.log", concurrency=4)) as worker:
        yield Deployment(str(request.param), reconciling_client, worker, tmp_path, store)
