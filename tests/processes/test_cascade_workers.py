"""A cascade with a real ``surehand worker`` (private redis-server broker, real Redis leases,
the test store on SQLite and Postgres): cancelling a parent stops its child's running command
agent, whole process tree, and archives the child and the grandchild waiting under it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptCause, AttemptState, Bucket, ReportStatus
from surehand.store import Store
from tests.agent_procs import marked, require_proc, unique_seconds
from tests.procs import RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.cancel_workers import TREE_AGENT, agent_env, wait_started

pytestmark = pytest.mark.slow


def test_cancelling_a_parent_stops_its_running_child_agent_and_archives_the_tree(
    store: Store, broker: RedisServer, client: Surehand, tmp_path: Path
) -> None:
    require_proc()
    mark = unique_seconds()
    env = agent_env(store, broker, tmp_path, TREE_AGENT, mark, SUREHAND_AGENT_SANDBOX="none")
    # The worker serves DEV only: the parent (for QA) and the grandchild (for OPS) wait.
    parent = client.write_task(sender="PM", recipient="QA", subject="Ship it").task_id
    assert parent is not None
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        child = client.write_task(
            sender="QA", recipient="DEV", subject="Build it", parent=parent
        ).task_id
        assert child is not None
        grandchild = client.write_task(
            sender="DEV", recipient="OPS", subject="Deploy it", parent=child
        ).task_id
        assert grandchild is not None
        wait_started(tmp_path, worker, mark)

        assert client.cancel(parent, reason="the release is off", actor="PM").outcome == (
            "archived"
        )

        wait_until(lambda: marked(mark) == [], timeout=30, what="the child's tree to stop")
        wait_until(
            lambda: read_task(store, child).bucket is Bucket.ARCHIVE,
            timeout=30,
            what="the child to be archived",
        )
    [attempt] = attempts_of(store, child)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.CANCELLED)
    [report] = reports_of(store, child)
    assert report.status is ReportStatus.ABORTED
    assert f"parent {parent} cancelled: the release is off" in report.body
    assert read_task(store, grandchild).bucket is Bucket.ARCHIVE
    assert attempts_of(store, grandchild) == []
    assert client.leases.holder(child) is None
