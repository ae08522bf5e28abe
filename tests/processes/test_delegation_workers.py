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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket
from surehand.store import Store, tasks
from tests.delegation_agents import LEDGER_ENV, ledger
from tests.deployment import Deployment, deployed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def deployment(store: Store, tmp_path: Path) -> Iterator[Deployment]:
    agents = "tests.delegation_agents"
    env = {
        "SUREHAND_AGENTS": f"PM={agents}:pm,DEV={agents}:dev,QA={agents}:qa",
        LEDGER_ENV: str(tmp_path / "ledger.jsonl"),
    }
    with deployed(store, tmp_path, "delegation", env) as built:
        built.timeout = 90.0
        yield built


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
