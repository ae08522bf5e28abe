"""The session MCP server: an agent declares its own effects over MCP, fenced like
``ctx.operation``; a token acts for its own attempt only, and only while it runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from surehand.facade import Surehand
from surehand.mcp.session_server import SessionMcp
from surehand.model import EventKind, OperationState
from tests.session_helpers import (
    Harness,
    attempts_of,
    claimed,
    committed_task,
    events_of,
    operations_of,
    reports_of,
)
from tests.shared.session_mcp import _calls, call, granted, structured

AGENT = Path(__file__).parents[1] / "mcp_agent.py"
TICKET = {"project": "OPS", "title": "Rotate the API keys"}


def test_an_effect_begun_and_ended_over_mcp_is_recorded_and_then_already_done(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, _ = granted(mcp, claimed(harness_sh.services, task_id))
    begin = ("effect_begin", {"name": "ticket.create", "args": TICKET, "idempotency_key": "k1"})

    first, brief = anyio.run(_calls, grant, grant.url, [begin, ("recovery_brief", {})])
    begun = structured(first)
    end = {"operation_id": begun["operation_id"], "outcome": "succeeded", "receipt": "OPS-1"}
    ended, again, twice = anyio.run(
        _calls, grant, grant.url, [("effect_end", end), begin, ("effect_end", end)]
    )

    assert begun["status"] == "begun"
    assert structured(brief)["recovering"] is False
    assert structured(ended)["status"] == "recorded"
    assert structured(again)["status"] == "already_done"
    assert structured(again)["receipt"] == "OPS-1"
    assert structured(twice)["status"] == "already_recorded"
    [op] = operations_of(harness_sh.store, task_id)
    assert (op.name, op.state, op.external_receipt) == (
        "ticket.create",
        OperationState.SUCCEEDED,
        "OPS-1",
    )
    assert op.idempotency_key == "k1"


def test_a_stale_attempts_mcp_call_is_refused_and_leaves_a_stale_owner_fenced_event(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    session = claimed(harness_sh.services, task_id)
    grant, _ = granted(mcp, session)
    session.fail(RuntimeError("the agent raised"))  # attempt 1 no longer owns the TASK

    refused = call(grant, "effect_begin", {"name": "ticket.create", "args": TICKET})

    assert refused.is_error
    error = structured(refused)["error"]
    assert error["code"] == "stale_owner"
    assert "no longer owns the TASK" in error["detail"]
    assert operations_of(harness_sh.store, task_id) == []
    [fenced] = events_of(harness_sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert fenced.data["write"] == "operation_intent:ticket.create"


def test_a_token_cannot_act_on_another_task_or_after_its_attempt_ends(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_a, task_b = committed_task(harness_sh), committed_task(harness_sh)
    grant_a, _ = granted(mcp, claimed(harness_sh.services, task_a))
    grant_b, _ = granted(mcp, claimed(harness_sh.services, task_b))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    bearer_a = {"Authorization": f"Bearer {grant_a.token}"}

    on_b = httpx.post(grant_b.url, json=body, headers=bearer_a)
    assert on_b.status_code == 403
    assert on_b.json()["error"]["data"]["detail"] == f"this token acts on {task_a} only"
    assert not structured(call(grant_a, "progress", {"note": "half way"})).get("error")

    mcp.revoke(grant_a)  # what the command agent does when the session ends
    after = httpx.post(grant_a.url, json=body, headers=bearer_a)
    assert after.status_code == 401
    assert httpx.post(grant_b.url, json=body).status_code == 401  # no token at all
    assert [r.status.value for r in reports_of(harness_sh.store, task_a)] == ["in_progress"]
    assert reports_of(harness_sh.store, task_b) == []


def test_a_session_that_lost_its_lease_is_refused_every_call(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, cancelled = granted(mcp, claimed(harness_sh.services, task_id))
    cancelled.set()

    refused = call(grant, "report", {"body": "done", "status": "done"})

    assert structured(refused)["error"]["code"] == "lease_lost"
    assert reports_of(harness_sh.store, task_id) == []


def test_unknown_arguments_are_refused_as_a_problem(harness_sh: Surehand, mcp: SessionMcp) -> None:
    grant, _ = granted(mcp, claimed(harness_sh.services, committed_task(harness_sh)))

    refused = call(grant, "effect_begin", {"name": "x", "args": {}, "task_id": "TASK-1"})

    assert refused.is_error
    assert structured(refused)["error"]["code"] == "invalid_request"


@pytest.mark.slow
def test_a_command_agent_speaks_mcp_to_its_session_and_its_token_dies_with_it(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TEST_DIR", str(tmp_path))
    harness_sh = harness.surehand(
        agents="DEV=command",
        command_agent=f"{sys.executable} {AGENT} finish",
        agent_env="AGENT_TEST_DIR",
        agent_bind=f"{tmp_path},{AGENT}:ro",  # its ledger, and the agent (the view has no tests)
    )
    task_id = committed_task(harness_sh)

    outcome = harness_sh.run_session(task_id)

    assert outcome.outcome == "settled", outcome
    assert (tmp_path / "ledger.txt").read_text().splitlines() == [
        "created Rotate the API keys (attempt 1)"
    ]
    [op] = operations_of(harness_sh.store, task_id)
    assert (op.state, op.external_receipt) == (OperationState.SUCCEEDED, "OPS-1")
    [report] = reports_of(harness_sh.store, task_id)
    assert report.body == "created ticket OPS-1"
    [attempt] = attempts_of(harness_sh.store, task_id)
    work_dir = harness.work_dir / attempt.attempt_id
    config = json.loads((work_dir / ".mcp.json").read_text())
    url = config["mcpServers"]["surehand"]["url"]
    assert url.endswith(f"/tasks/{task_id}/mcp")
    assert config["mcpServers"]["surehand"]["headers"] == {
        "Authorization": "Bearer ${SUREHAND_MCP_TOKEN}"
    }
    assert not (work_dir / ".codex").exists()  # Codex ignores it: its preset passes -c
    # The session is over: whatever token it had is refused now.
    assert httpx.post(url, json={}, headers={"Authorization": "Bearer x"}).status_code == 401


@pytest.mark.slow
def test_a_command_agent_that_returns_with_its_effect_still_open_is_held_not_settled(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_TEST_DIR", str(tmp_path))
    harness_sh = harness.surehand(
        agents="DEV=command",
        command_agent=f"{sys.executable} {AGENT} forget_end",
        agent_env="AGENT_TEST_DIR",
        agent_bind=f"{tmp_path},{AGENT}:ro",  # its ledger, and the agent (the view has no tests)
        lost_grace_seconds=0.0,
    )
    task_id = committed_task(harness_sh)

    outcome = harness_sh.run_session(task_id)
    harness_sh.reconcile()

    assert outcome.outcome == "failed", outcome
    [op] = operations_of(harness_sh.store, task_id)
    assert op.state is OperationState.INTENT
    [case] = harness_sh.cases()
    assert case.admission is not None
    assert case.admission.value == "hold_for_review"
    assert f"operation {op.operation_id} 'ticket.create'" in case.effect_refs["why"]
    assert reports_of(harness_sh.store, task_id) == []
