"""Each session's budget on its session tools: REPORT revisions, operations, bytes and calls a
minute. Past a limit a call is refused with ``session_limit`` naming the limit and its
setting, nothing is written, and the session goes on working otherwise; a journaled tool call
the budget refuses is denied, never let through. Issue 29 measured 105 one-MiB progress
revisions and 105 intents in 20 s from one session; the last test floods a real worker so."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from surehand.dispatcher.context import Services
from surehand.errors import SessionLimitReached, SessionRateLimited
from surehand.facade import Surehand
from surehand.mcp.session_server import SessionMcp
from surehand.mcp.session_state import MIB, SessionBudget, SessionLimits
from surehand.mcp.session_tools import Grant
from surehand.model import ReportStatus
from surehand.store import Store
from tests.procs import RedisServer, running, start_worker
from tests.session_helpers import (
    Harness,
    claimed,
    committed_task,
    operations_of,
    reports_of,
)
from tests.shared.agent_clis import settled_by
from tests.shared.session_hooks import DEPLOY, decision, granted, hook
from tests.shared.session_mcp import call, structured
from tests.shared.workers import worker_env

SMALL = SessionLimits(max_operations=2, max_reports=2, max_bytes=MIB, calls_per_minute=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_refuses_the_call_past_each_limit_and_counts_nothing_for_it() -> None:
    budget = SessionBudget(SMALL, Clock())
    budget.spend("report", 10)
    budget.spend("report", 10)

    with pytest.raises(SessionLimitReached, match="SUREHAND_SESSION_TOOLS_MAX_REPORTS") as refused:
        budget.spend("report", 10)
    budget.spend("operation", 10)  # another kind goes on
    with pytest.raises(SessionLimitReached, match="1 MiB of arguments"):
        budget.spend("call", MIB)

    assert (refused.value.code, refused.value.limit, refused.value.retryable) == (
        "session_limit",
        "max_reports",
        False,
    )
    assert (budget.reports, budget.operations, budget.bytes) == (2, 1, 30)


def test_the_rate_limit_passes_with_the_minute_and_says_how_long_to_wait() -> None:
    clock = Clock()
    budget = SessionBudget(SMALL, clock)
    for _ in range(5):
        budget.spend("call", 0)
        clock.now += 10

    with pytest.raises(SessionRateLimited, match="wait 10 s") as refused:
        budget.spend("call", 0)
    clock.now += 10  # the first call is a minute old now

    budget.spend("call", 0)
    assert refused.value.retryable
    assert refused.value.details["retry_after"] == 10


@pytest.fixture
def limited(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionMcp]:
    monkeypatch.setattr("surehand.dispatcher.sessions.STORE_RETRY_DELAYS", ())
    sh = harness.surehand(
        session_tools_max_reports=2,
        session_tools_max_operations=2,
        session_tools_max_mib=1,
        session_tools_calls_per_minute=50,
    )
    server = SessionMcp(sh.services)
    yield server
    server.stop()


def session_of(server: SessionMcp) -> tuple[Services, str, Grant]:
    """A claimed TASK's session, granted (with hooks) on ``server``."""
    services = server.services
    task_id = committed_task(services)
    return services, task_id, granted(server, claimed(services, task_id))


def test_a_progress_flood_is_refused_typed_and_the_session_keeps_working(
    limited: SessionMcp,
) -> None:
    services, task_id, grant = session_of(limited)

    answers = [call(grant, "progress", {"note": f"step {n}"}) for n in range(4)]
    begun = structured(call(grant, "effect_begin", {"name": "deploy", "args": {}}))

    refusals = [structured(answer)["error"] for answer in answers[2:]]
    assert [r["code"] for r in refusals] == ["session_limit", "session_limit"]
    assert refusals[0]["limit"] == "max_reports"
    assert refusals[0]["status"] == 429
    assert "SUREHAND_SESSION_TOOLS_MAX_REPORTS" in refusals[0]["detail"]
    assert begun["status"] == "begun"  # the session goes on
    assert len(reports_of(services.store, task_id)) == 2


def test_arguments_past_the_byte_limit_are_refused_before_they_are_stored(
    limited: SessionMcp,
) -> None:
    services, task_id, grant = session_of(limited)

    refused = structured(call(grant, "report", {"body": "x" * MIB, "status": "in_progress"}))

    assert (refused["error"]["code"], refused["error"]["limit"]) == ("session_limit", "max_mib")
    assert reports_of(services.store, task_id) == []


def test_a_journaled_call_past_the_operation_limit_is_denied_never_run_unjournaled(
    limited: SessionMcp,
) -> None:
    services, task_id, grant = session_of(limited)
    calls = [{"command": f"make deploy-{n}"} for n in range(3)]

    answers = [decision(hook(grant, "pre", f"toolu_{n}", c)) for n, c in enumerate(calls)]

    assert [a.split(":")[0] for a in answers] == ["allow", "allow", "deny"]
    assert "SUREHAND_SESSION_TOOLS_MAX_OPERATIONS" in answers[2]
    assert len(operations_of(services.store, task_id)) == 2
    assert decision(hook(grant, "pre", "toolu_0", DEPLOY | calls[0])).startswith("allow")


LIMITS = {
    "SUREHAND_SESSION_TOOLS_MAX_REPORTS": "10",
    "SUREHAND_SESSION_TOOLS_MAX_OPERATIONS": "20",
    "SUREHAND_SESSION_TOOLS_MAX_MIB": "2",
    "SUREHAND_SESSION_TOOLS_CALLS_PER_MINUTE": "100",
}


@pytest.mark.slow
def test_a_hostile_agents_tool_flood_under_a_real_worker_is_refused_and_its_task_settles(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
) -> None:
    agent = Path(__file__).parents[1].joinpath("hostile_agent.py")
    env = worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=f"{sys.executable} {agent}",
        SUREHAND_AGENT_BIND=f"{agent.parent}:ro",
        **LIMITS,
    )
    body = "HOSTILE " + json.dumps({"probe": "tool_flood", "mib": 0.9, "operations": 25})
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        created = reconciling_client.write_task(
            sender="PM", recipient="DEV", subject="flood", body=body
        )
        task_id = str(created.task_id)
        settled_by(reconciling_client, store, task_id, worker)

    *progress, final = reports_of(store, task_id)
    findings = json.loads(final.body)
    reports, limit = "session_limit:max_reports", "session_limit:max_mib"
    assert findings["big_reports"] == ["in_progress", "in_progress", limit]  # 0.9 MiB each
    assert findings["notes"] == ["in_progress"] * 8 + [reports] * 4
    assert findings["intents"] == ["begun"] * 20 + ["session_limit:max_operations"] * 5
    assert findings["ends"] == ["recorded"] * 20  # it still ends what it began
    assert findings["brief"] == ["ok"]
    assert findings["rate"][-1] == "session_limit:calls_per_minute"
    assert "SUREHAND_SESSION_TOOLS_CALLS_PER_MINUTE" in str(findings["details"])
    assert len(progress) == 10  # what the store kept: ten revisions, twenty operations
    assert all(r.status is ReportStatus.IN_PROGRESS for r in progress)
    assert len(operations_of(store, task_id)) == 20
