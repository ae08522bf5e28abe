"""Prometheus counters move where the events happen: submissions in write_task, sessions in the
Celery task's postrun signal, lease renew failures at session end, lost sessions, admissions
and pass time in every reconciler pass. Compared as deltas: the registry is process-wide."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from surehand.agents.builtin import register_demo
from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.dispatcher.claims import claim
from surehand.facade import Surehand
from surehand.metrics import MAX_TENANT_LABELS, OTHER_TENANTS, _cap_tenants, exposition


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def fast_heartbeat_sh(tmp_path: Path) -> Iterator[Surehand]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        work_dir=tmp_path / "sessions",
        heartbeat_seconds=0.05,
        lease_ttl_seconds=5.0,
        lost_grace_seconds=0.0,
    )
    handle = Surehand(settings=settings)
    yield handle
    handle.close()


def test_submissions_by_disposition(fast_heartbeat_sh: Surehand) -> None:
    before = {d: sample("surehand_submissions_total", disposition=d) for d in ("created", "reused")}
    args = {"sender": "PM", "recipient": "DEV", "subject": "x", "client_submission_id": "m-1"}
    fast_heartbeat_sh.write_task(**args)
    fast_heartbeat_sh.write_task(**args)
    fast_heartbeat_sh.write_task(**{**args, "subject": "y"})
    assert sample("surehand_submissions_total", disposition="created") == before["created"] + 1
    assert sample("surehand_submissions_total", disposition="reused") == before["reused"] + 1
    assert sample("surehand_submissions_total", disposition="conflict") >= 1


def test_sessions_are_counted_by_outcome_from_the_celery_task(fast_heartbeat_sh: Surehand) -> None:
    register_demo(fast_heartbeat_sh.registry)
    task_id = str(
        fast_heartbeat_sh.write_task(sender="PM", recipient="DEV", subject="count me").task_id
    )
    before = sample("surehand_sessions_total", outcome="settled")
    # apply() runs the task body through Celery's tracer, which sends task_postrun.
    result = fast_heartbeat_sh.celery.tasks["surehand.run_session"].apply(args=(task_id,)).get()
    assert result["outcome"] == "settled"
    assert sample("surehand_sessions_total", outcome="settled") == before + 1


def test_lease_renew_failures_are_counted(fast_heartbeat_sh: Surehand) -> None:
    def loses_its_lease(ctx: SessionContext) -> str:
        fast_heartbeat_sh.leases.client.delete(
            fast_heartbeat_sh.leases.key(ctx.task.task_id)
        )  # as if it expired
        ctx.wait_cancelled(5)
        return "stopped"

    fast_heartbeat_sh.registry.register("DEV", loses_its_lease)
    task_id = str(
        fast_heartbeat_sh.write_task(sender="PM", recipient="DEV", subject="lose it").task_id
    )
    before = sample("surehand_lease_renew_failures_total")
    assert fast_heartbeat_sh.run_session(task_id).outcome == "lease_lost"
    assert sample("surehand_lease_renew_failures_total") >= before + 1


def test_reconciler_passes_lost_sessions_and_admissions(fast_heartbeat_sh: Surehand) -> None:
    task_id = str(
        fast_heartbeat_sh.write_task(sender="PM", recipient="DEV", subject="vanish").task_id
    )
    session = claim(fast_heartbeat_sh.services, task_id, worker="gone", message_id=None)
    assert session is not None  # running, but no lease was ever taken: the owner is gone
    passes = sample("surehand_reconcile_pass_seconds_count")
    lost = sample("surehand_lost_sessions_total")
    admitted = sample("surehand_admissions_total", disposition="reexecute")
    deadline = time.monotonic() + 10
    while sample("surehand_lost_sessions_total") == lost and time.monotonic() < deadline:
        fast_heartbeat_sh.reconcile()
        time.sleep(0.1)
    assert sample("surehand_lost_sessions_total") == lost + 1
    assert sample("surehand_admissions_total", disposition="reexecute") == admitted + 1
    assert sample("surehand_reconcile_pass_seconds_count") >= passes + 2


def test_exposition_names_every_metric() -> None:
    payload, content_type = exposition()
    text = payload.decode()
    assert content_type.startswith("text/plain")
    for name in (
        "surehand_submissions_total",
        "surehand_sessions_total",
        "surehand_lost_sessions_total",
        "surehand_admissions_total",
        "surehand_lease_renew_failures_total",
        "surehand_reconcile_pass_seconds",
    ):
        assert f"# HELP {name}" in text


def test_task_counts_keep_tenant_labels_bounded() -> None:
    """surehand_tasks{tenant,bucket}: the largest tenants keep a label, the rest sum as _other."""
    rows = [(f"t{i:03d}", "inbox", i + 1) for i in range(MAX_TENANT_LABELS + 50)]
    rows.append(("t149", "done", 5))
    counts = _cap_tenants(rows)
    tenants = {tenant for tenant, _bucket in counts}
    assert len(tenants) == MAX_TENANT_LABELS + 1
    assert counts[("t149", "done")] == 5
    assert counts[(OTHER_TENANTS, "inbox")] == sum(range(1, 51))
    assert sum(counts.values()) == sum(count for _t, _b, count in rows)
