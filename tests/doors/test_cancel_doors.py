"""Cancel, time limits and pauses on the HTTP, CLI and MCP doors (both databases).

Each door calls the one service function; these tests check what each door adds: its
schema, its errors (problem+json on HTTP) and that the principal is the one recorded.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import Client

from surehand.config import Settings
from surehand.facade import Surehand
from surehand.mcp.tools import Tools, build_server
from surehand.model import Bucket, EventKind, Task
from surehand.principals import Principal
from surehand.store import Store, events, tasks
from tests.shared.api import REQUEST, Served, post_task
from tests.shared.cli import EXIT_REFUSED, SUBMIT, Cli


def task_of(api: Served, task_id: str) -> Task:
    with api.store.snapshot() as connection:
        found = tasks.get(connection, task_id)
    assert found is not None
    return found


def test_http_cancel_archives_an_inbox_task_and_records_the_principal(api: Served) -> None:
    with api.client("tok-pm") as pm:
        task_id = post_task(pm, "c-1").json()["task_id"]
        answer = pm.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "not needed"})
    assert answer.status_code == 200
    assert answer.json()["outcome"] == "archived"
    assert answer.json()["cancel"]["by"] == "PM"
    assert task_of(api, task_id).bucket is Bucket.ARCHIVE
    with api.store.snapshot() as connection:
        [event] = events.history(connection, task_id, EventKind.CANCEL_REQUESTED)
    assert (event.by, event.data["principal"]) == ("PM", "alice")


def test_http_cancel_refuses_others_with_problem_json_and_changes_nothing(api: Served) -> None:
    with api.client("tok-pm") as pm:
        task_id = post_task(pm, "c-2").json()["task_id"]
    with api.client("tok-dev") as dev:
        refused = dev.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "mine to stop"})
        posing = dev.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "x", "actor": "PM"})
        blank = dev.post(f"/v1/tasks/{task_id}/cancel", json={})
    with api.client("tok-globex") as globex:
        foreign = globex.post(f"/v1/tasks/{task_id}/cancel", json={"reason": "not ours"})
    assert (refused.status_code, posing.status_code, foreign.status_code) == (403, 403, 404)
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "not_authorized"
    assert blank.status_code in (400, 422)
    task = task_of(api, task_id)
    assert task.cancel is None
    assert task.bucket is Bucket.INBOX


def test_http_write_task_takes_a_time_limit(api: Served) -> None:
    with api.client("tok-pm") as pm:
        created = post_task(pm, "t-1", {**REQUEST, "time_limit_seconds": 90})
        bad = post_task(pm, "t-2", {**REQUEST, "time_limit_seconds": -1})
    assert created.status_code == 201
    assert task_of(api, created.json()["task_id"]).fields.time_limit_seconds == 90
    assert bad.status_code in (400, 422)


def test_http_write_task_takes_a_budget(api: Served) -> None:
    with api.client("tok-pm") as pm:
        created = post_task(pm, "b-1", {**REQUEST, "budget_usd": 2.5})
        bad = post_task(pm, "b-2", {**REQUEST, "budget_usd": -1})
    assert created.status_code == 201
    assert task_of(api, created.json()["task_id"]).budget_usd == 2.5
    assert bad.status_code in (400, 422)


def test_http_pause_and_resume_a_role(api: Served) -> None:
    with api.client("tok-dev") as dev:
        assert dev.post("/v1/roles/DEV/pause", json={"reason": "no"}).status_code == 403
    with api.client("tok-pm") as pm:
        paused = pm.post("/v1/roles/DEV/pause", json={"reason": "provider down"})
        listed = pm.get("/v1/roles/paused").json()["paused"]
        resumed = pm.post("/v1/roles/DEV/resume")
        after = pm.get("/v1/roles/paused").json()["paused"]
    with api.client("tok-globex") as globex:
        assert globex.get("/v1/roles/paused").json()["paused"] == []
    assert paused.status_code == 200
    assert paused.json()["principal"] == "alice"
    assert [p["role"] for p in listed] == ["DEV"]
    assert resumed.json()["resumed"] is True
    assert after == []


def test_openapi_documents_the_new_routes(api: Served) -> None:
    with api.client() as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/tasks/{task_id}/cancel" in paths
    assert {"/v1/roles/{role}/pause", "/v1/roles/{role}/resume", "/v1/roles/paused"} <= set(paths)
    schema = json.dumps(paths["/v1/tasks/{task_id}/cancel"])
    assert "CancelBody" in schema


# -- CLI ----------------------------------------------------------------------------------------


def test_cli_cancel_pause_resume_and_time_limit(cli: Cli) -> None:
    created = cli.json(*SUBMIT, "--id", "c-9", "--time-limit", "120", "--budget-usd", "3")
    task_id = created["task_id"]
    assert cli.sh.get_task(task_id).fields.time_limit_seconds == 120
    assert cli.sh.get_task(task_id).budget_usd == 3
    refused = cli.json("cancel", task_id, "--reason", "x", "--actor", "DEV", code=EXIT_REFUSED)
    assert refused["error"]["code"] == "not_authorized"
    cancelled = cli.json("cancel", task_id, "--reason", "duplicate of another")
    assert (cancelled["outcome"], cancelled["cancel"]["by"]) == ("archived", "ADMIN")
    assert cli("cancel", task_id, "--reason", "again").stdout.count("asked before") == 1
    paused = cli.json("pause", "QA", "--reason", "bad deploy")
    assert (paused["role"], paused["reason"]) == ("QA", "bad deploy")
    assert "paused: role QA" in cli("tasks").stdout
    assert cli.json("resume", "QA")["resumed"] is True
    assert "paused" not in cli("tasks").stdout


# -- MCP ----------------------------------------------------------------------------------------


def test_mcp_cancel_task_and_time_limit(store: Store) -> None:
    sh = Surehand(settings=Settings(database_url=store.url))

    async def session() -> tuple[Any, Any, Any, Any]:
        async with Client(build_server(sh)) as mcp:
            args = {
                "sender": "PM",
                "recipient": "DEV",
                "subject": "Write notes",
                "client_submission_id": "m-1",
                "time_limit_seconds": 30,
                "budget_usd": 1.5,
            }
            created = await mcp.call_tool("write_task", args)
            task_id = created.structured_content["task_id"]
            blank = await mcp.call_tool("cancel_task", {"task_id": task_id, "reason": " "})
            cancelled = await mcp.call_tool("cancel_task", {"task_id": task_id, "reason": "no"})
            status = await mcp.call_tool("task_status", {"task_id": task_id})
            return created, blank, cancelled, status

    try:
        created, blank, cancelled, status = anyio.run(session)
        task = sh.get_task(created.structured_content["task_id"])
    finally:
        sh.close()
    assert task.fields.time_limit_seconds == 30
    assert task.budget_usd == 1.5
    assert blank.is_error
    assert blank.structured_content["error"]["field"] == "reason"
    assert cancelled.structured_content["outcome"] == "archived"
    assert status.structured_content["bucket"] == "archive"
    assert status.structured_content["cancel"]["reason"] == "no"


def test_mcp_pause_and_resume_a_role_with_the_same_permissions(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sh = Surehand(settings=Settings(database_url=store.url))
    caller = {"principal": Principal("dana", "DEV", "default")}
    monkeypatch.setattr(Tools, "principal", lambda _self, _ctx: caller["principal"])

    async def call(name: str, args: dict[str, Any]) -> Any:
        async with Client(build_server(sh)) as mcp:
            return await mcp.call_tool(name, args)

    try:
        refused = anyio.run(call, "pause_role", {"role": "DEV", "reason": "mine"})
        paused_by_dev = sh.paused_roles()
        caller["principal"] = Principal("alice", "PM", "default")
        paused = anyio.run(call, "pause_role", {"role": "DEV", "reason": "provider down"})
        listed = [p.role for p in sh.paused_roles()]
        caller["principal"] = Principal("dana", "DEV", "default")
        refused_resume = anyio.run(call, "resume_role", {"role": "DEV"})
        still = [p.role for p in sh.paused_roles()]
        caller["principal"] = Principal("alice", "PM", "default")
        resumed = anyio.run(call, "resume_role", {"role": "DEV"})
        after = sh.paused_roles()
    finally:
        sh.close()
    assert refused.is_error
    assert refused.structured_content["error"]["code"] == "not_authorized"
    assert paused_by_dev == []
    assert (paused.structured_content["role"], paused.structured_content["reason"]) == (
        "DEV",
        "provider down",
    )
    assert (paused.structured_content["paused_by"], paused.structured_content["principal"]) == (
        "PM",
        "alice",
    )
    assert listed == ["DEV"]
    assert refused_resume.is_error
    assert refused_resume.structured_content["error"]["code"] == "not_authorized"
    assert still == ["DEV"]
    assert resumed.structured_content == {"role": "DEV", "resumed": True, "waiting": 0}
    assert after == []
