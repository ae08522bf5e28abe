"""The MCP server through the SDK's real clients: stdio (``python -m surehand mcp`` spawned the
way an agent host spawns it) and streamable HTTP with bearer tokens."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from surehand.facade import Surehand
from tests.procs import free_port, spawn, wait_until

TASK = {"sender": "PM", "recipient": "DEV", "subject": "Write the release notes"}
# Tokens as `surehand mcp --transport http` accepts them at start: 16 characters or more.
ACME, GLOBEX = "tok-acme-0123456789", "tok-globex-0123456789"


def stdio_params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "surehand", "mcp"],
        env={"SUREHAND_HOME": str(home), "PYTHONPATH": str(Path(__file__).parents[2])},
        cwd=str(home),
    )


def structured(result: Any) -> dict[str, Any]:
    data = result.structured_content
    assert isinstance(data, dict), result
    return data


def test_write_task_twice_over_stdio_is_created_then_reused(tmp_path: Path) -> None:
    async def session() -> dict[str, Any]:
        async with Client(stdio_params(tmp_path)) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            args = {**TASK, "client_submission_id": "notes-2026-01"}
            first = await client.call_tool("write_task", args)
            second = await client.call_tool("write_task", args)
            changed = await client.call_tool("write_task", {**args, "subject": "Other"})
            invalid = await client.call_tool("write_task", {**args, "sender": "pm"})
            task_id = structured(first)["task_id"]
            status = await client.call_tool("task_status", {"task_id": task_id})
            listing = await client.call_tool("list_tasks", {"bucket": "inbox"})
            missing = await client.call_tool("read_task", {"task_id": "TASK-20200101-001"})
            return {
                "tools": tools,
                "first": first,
                "second": second,
                "changed": changed,
                "invalid": invalid,
                "status": status,
                "listing": listing,
                "missing": missing,
            }

    seen = anyio.run(session)
    assert set(seen["tools"]) == {
        "write_task",
        "write_report",
        "read_task",
        "list_tasks",
        "task_status",
        "cancel_task",
        "release_task",
        "pause_role",
        "resume_role",
    }
    description = seen["tools"]["write_task"].description
    assert "reuse" in description
    assert "retry" in description
    first, second = structured(seen["first"]), structured(seen["second"])
    assert (first["disposition"], second["disposition"]) == ("created", "reused")
    assert first["task_id"] == second["task_id"]
    assert second["action_taken"] is False
    assert structured(seen["changed"])["conflict"]["code"] == "digest_mismatch"
    assert seen["invalid"].is_error
    assert structured(seen["invalid"])["error"]["field"] == "sender"
    assert structured(seen["status"])["bucket"] == "inbox"
    assert [t["task_id"] for t in structured(seen["listing"])["tasks"]] == [first["task_id"]]
    assert seen["missing"].is_error
    assert structured(seen["missing"])["error"]["code"] == "task_not_found"
    # The same store the CLI and HTTP read: one TASK.
    sh = Surehand(database_url=f"sqlite:///{tmp_path / 'surehand.sqlite3'}")
    assert [t.task_id for t in sh.list_tasks()] == [first["task_id"]]


def test_report_and_read_over_stdio(tmp_path: Path) -> None:
    sh = Surehand(database_url=f"sqlite:///{tmp_path / 'surehand.sqlite3'}")
    task_id = sh.write_task(**TASK, client_submission_id="r-1").task_id
    assert task_id is not None
    sh.transition(task_id, "claim", actor="DEV")

    async def session() -> tuple[Any, Any, Any]:
        async with Client(stdio_params(tmp_path)) as client:
            report = {"task_id": task_id, "reporter": "DEV", "body": "Notes are written."}
            first = await client.call_tool("write_report", report)
            again = await client.call_tool("write_report", report)
            read = await client.call_tool("read_task", {"task_id": task_id})
            return first, again, read

    first, again, read = anyio.run(session)
    assert structured(first)["deduplicated"] is False
    assert structured(again)["deduplicated"] is True
    assert structured(read)["task"]["bucket"] == "active"
    assert [r["body"] for r in structured(read)["reports"]] == ["Notes are written."]


@pytest.fixture
def mcp_http(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {
        "SUREHAND_HOME": str(tmp_path),
        "SUREHAND_API_TOKENS": f"{ACME}=ann:PM:acme,{GLOBEX}=bo:PM:globex",
    }
    proc = spawn(["mcp", "--transport", "http", "--port", str(port)], env, tmp_path / "mcp.log")
    url = f"http://127.0.0.1:{port}/mcp"

    def listening() -> bool:
        try:
            httpx.get(url, timeout=0.5)
        except httpx.TransportError:
            return proc.returncode is not None
        return True

    try:
        wait_until(listening, timeout=30, what="the MCP HTTP server")
        assert proc.returncode is None, proc.output()
        yield url
    finally:
        proc.kill()


@pytest.mark.slow
def test_http_transport_needs_a_token_and_scopes_tenants(mcp_http: str) -> None:
    assert httpx.post(mcp_http, json={}).status_code == 401
    args = {**TASK, "client_submission_id": "same-id"}

    async def session(token: str) -> dict[str, Any]:
        # Close the HTTP client we pass in: the SDK does not own it, and one left to the
        # garbage collector finalizes at a random later point in the test run.
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(mcp_http, http_client=http)) as client,
        ):
            created = structured(await client.call_tool("write_task", args))
            listed = structured(await client.call_tool("list_tasks", {}))
            return {"created": created, "listed": listed}

    acme = anyio.run(session, ACME)
    globex = anyio.run(session, GLOBEX)
    assert acme["created"]["disposition"] == globex["created"]["disposition"] == "created"
    assert acme["created"]["task_id"] != globex["created"]["task_id"]
    assert [t["tenant"] for t in globex["listed"]["tasks"]] == ["globex"]
