"""Delegation in a real deployment: ``surehand worker`` and ``surehand beat`` processes, a
private ``redis-server`` (broker and leases), on each database.

The PM's first worker serves PM only and kills itself (SIGKILL) right after its first
``delegate`` committed: the DEV child exists, the PM never got the answer. A second PM worker
runs the PM's successor, which delegates DEV again (answered ``reused``, the same child) and QA
after DEV, then waits for both without holding a worker. DEV's first worker kills itself in
the middle of DEV's build (its keyed intent recorded, the effect not run); a third worker runs
DEV's successor, which builds once. QA waits in ``inbox`` until its approver approves DEV,
then runs and sees DEV done; once QA is approved too, the PM runs a third attempt and reports
both children's REPORTs. Counted in the agents' own ledger: one child per key, the build once.
Settings are scaled down: lease TTL 1 s, heartbeat 0.3 s, grace 0.5 s, reconcile every 0.5 s.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket
from surehand.store import Store, tasks
from tests.delegation_agents import LEDGER_ENV, ledger
from tests.procs import Proc, RedisServer, spawn

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@dataclass
class Deployment:
    tmp: Path
    store: Store
    env: dict[str, str]
    procs: list[Proc] = field(default_factory=list)

    def start(self, args: list[str], ready: str, **extra: str) -> Proc:
        name = f"{args[0]}{len(self.procs) + 1}"
        proc = spawn(args, {**self.env, **extra}, self.tmp / f"{name}.log")
        self.procs.append(proc)
        self.wait(lambda: ready in proc.output() or proc.returncode is not None, f"{name} up")
        assert proc.returncode is None, proc.output()[-3000:]
        return proc

    def worker(self, roles: str, **extra: str) -> Proc:
        name = f"w{len(self.procs) + 1}@delegation"
        args = ["worker", "--roles", roles, "--concurrency", "2", "--hostname", name]
        return self.start(args, "ready.", **extra)

    def beat(self) -> Proc:
        return self.start(["beat", "--loglevel", "info"], "beat: Starting")

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        logs = "\n".join(f"--- {p.log.name}\n{p.output()[-2500:]}" for p in self.procs)
        pytest.fail(f"timed out after {timeout}s waiting for {what}\n{logs}")

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()


@pytest.fixture
def deployment(store: Store, tmp_path: Path) -> Iterator[Deployment]:
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    agents = "tests.delegation_agents"
    env = {
        "SUREHAND_DATABASE_URL": store.url,
        "SUREHAND_REDIS_URL": redis.url,
        "SUREHAND_BROKER_URL": redis.url,
        "SUREHAND_AGENTS": f"PM={agents}:pm,DEV={agents}:dev,QA={agents}:qa",
        "SUREHAND_LEASE_TTL_SECONDS": "1.0",
        "SUREHAND_HEARTBEAT_SECONDS": "0.3",
        "SUREHAND_LOST_GRACE_SECONDS": "0.5",
        "SUREHAND_RECONCILE_INTERVAL_SECONDS": "0.5",
        "SUREHAND_HOME": str(tmp_path / "home"),
        "SUREHAND_WORK_DIR": str(tmp_path / "work"),
        "PYTHONPATH": str(REPO),
        LEDGER_ENV: str(tmp_path / "ledger.jsonl"),
    }
    built = Deployment(tmp_path, store, env)
    try:
        yield built
    finally:
        built.close()
        redis.stop()


def test_a_pm_killed_after_delegating_is_succeeded_by_one_that_reuses_its_children(
    deployment: Deployment, store: Store
) -> None:
    sh = Surehand(database_url=store.url)
    crash_at = "session.after_delegate"  # the child committed, the PM not yet answered
    doomed = deployment.worker("PM", SUREHAND_CRASH_AT=crash_at)
    deployment.beat()
    parent = sh.write_task(
        sender="ADMIN", recipient="PM", subject="Ship the login fix", body="DEV builds, QA tests."
    ).task_id
    assert parent is not None
    deployment.wait(lambda: doomed.returncode is not None, "the PM's worker to die")
    assert doomed.returncode == -signal.SIGKILL, doomed.output()[-2000:]
    assert ledger(Path(deployment.env[LEDGER_ENV])) == []  # the answer died with it
    # DEV's first worker dies mid-effect: its intent recorded, the build not run.
    crash_at = "operation.after_intent"
    doomed_dev = deployment.worker("DEV", SUREHAND_CRASH_AT=crash_at)
    deployment.worker("PM")

    def children() -> list[str]:
        with store.snapshot() as connection:
            return [t.task_id for t in tasks.children(connection, parent)]

    def pm_lines() -> list[dict[str, Any]]:
        return [x for x in ledger(Path(deployment.env[LEDGER_ENV])) if x["agent"] == "PM"]

    deployment.wait(lambda: len(pm_lines()) >= 2, "the successor's two delegate answers")
    answers = pm_lines()
    assert [(x["attempt"], x["key"], x["disposition"]) for x in answers[:2]] == [
        (2, "dev", "reused"),
        (2, "qa", "created"),
    ]
    dev_id, qa_id = answers[0]["task_id"], answers[1]["task_id"]
    assert sorted(children()) == sorted([dev_id, qa_id])
    deployment.wait(lambda: doomed_dev.returncode is not None, "DEV's worker to die")
    assert doomed_dev.returncode == -signal.SIGKILL, doomed_dev.output()[-2000:]
    deployment.worker("DEV,QA")  # runs the reconciler's passes and DEV's successor
    deployment.wait(lambda: sh.get_task(dev_id).bucket is Bucket.REVIEW, "DEV's REPORT")
    assert sh.get_task(qa_id).bucket is Bucket.INBOX  # QA waits for DEV to be done
    sh.transition(dev_id, "approve", actor="PM")

    deployment.wait(lambda: sh.get_task(qa_id).bucket is Bucket.REVIEW, "QA's REPORT")
    lines = ledger(Path(deployment.env[LEDGER_ENV]))
    assert [x["dependencies"] for x in lines if x["agent"] == "QA"] == [{dev_id: "done"}]
    # Built once, by DEV's successor (the keyed intent admitted it to run again).
    assert [(x["task_id"], x["attempt"]) for x in lines if x["agent"] == "DEV"] == [(dev_id, 2)]
    assert [a.state for a in sh.attempts(dev_id)] == [
        AttemptState.SESSION_LOST,
        AttemptState.SUCCEEDED,
    ]
    # The PM waited in inbox, holding no worker, until QA was done too.
    assert sh.get_task(parent).bucket is Bucket.INBOX
    sh.transition(qa_id, "approve", actor="PM")

    deployment.wait(lambda: sh.get_task(parent).bucket is Bucket.REVIEW, "the PM's REPORT")
    assert [a.state for a in sh.attempts(parent)] == [
        AttemptState.SESSION_LOST,  # killed right after its first delegate
        AttemptState.SUCCEEDED,  # delegated again (reused, created) and waited
        AttemptState.SUCCEEDED,  # resumed with both REPORTs
    ]
    [report] = sh.reports(parent)
    assert report.body == "DEV: built on branch fix-login\nQA: all 12 tests pass"
    resumed = [x for x in ledger(Path(deployment.env[LEDGER_ENV])) if x.get("resumed")]
    assert [x["attempt"] for x in resumed] == [3]
    with store.snapshot() as connection:
        assert tasks.count(connection) == 3  # the PM's TASK and one child per key
    sh.close()
