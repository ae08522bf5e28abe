"""Hostile probes of the journal (registered in tests/hostile_agent.py's ``PROBES``).

- ``flood``: what issue 29 measured (105 one-MiB progress revisions and 105 intents in 20 s),
  against a worker whose session-tool limits are small: REPORT revisions of ``mib`` MiB, then
  small progress notes, then ``operations`` intents, each phase until it is refused; then it
  ends what it began and asks for its brief (the session must keep working), then calls the
  brief until the rate limit refuses it. Its findings: per phase the answers in order (the
  status, or the refusal's code and limit), and the refusals' details.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

MIB = 1024 * 1024


def flood_probe(params: dict[str, Any]) -> dict[str, Any]:
    return anyio.run(_flood, params)


async def _flood(params: dict[str, Any]) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {os.environ['SUREHAND_MCP_TOKEN']}"}
    findings: dict[str, Any] = {"details": {}}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(os.environ["SUREHAND_MCP_URL"], http_client=http)) as client,
    ):
        flood = Flood(client, findings)
        big = "x" * int(float(params.get("mib", 1)) * MIB)
        await flood.phase(
            "big_reports", 3, lambda n: ("report", {"body": f"{n} {big}", "status": "in_progress"})
        )
        await flood.phase("notes", 12, lambda n: ("progress", {"note": f"note {n}"}))
        begins = await flood.phase("intents", int(params.get("operations", 25)), _intent, keep=True)
        ends = [("effect_end", {"operation_id": i, "outcome": "succeeded"}) for i in begins]
        await flood.phase("ends", len(ends), lambda n: ends[n])
        await flood.phase("brief", 1, lambda _n: ("recovery_brief", {}))
        await flood.phase("rate", 1000, lambda _n: ("recovery_brief", {}), stop=True)
    return findings


def _intent(n: int) -> tuple[str, dict[str, Any]]:
    return "effect_begin", {"name": "flood", "args": {"n": n}}


class Flood:
    """Calls one tool many times and notes each answer."""

    def __init__(self, client: Client, findings: dict[str, Any]) -> None:
        self.client = client
        self.findings = findings

    async def phase(
        self, label: str, count: int, call: Any, *, keep: bool = False, stop: bool = False
    ) -> list[int]:
        """``count`` calls; the operation ids begun (``keep``); ``stop``: at the first refusal."""
        answers, begun = [], []
        for n in range(count):
            tool, arguments = call(n)
            result = await self.client.call_tool(tool, arguments)
            data = result.structured_content or {}
            if result.is_error:
                error = data.get("error", {})
                answers.append(f"{error.get('code')}:{error.get('limit')}")
                self.findings["details"].setdefault(answers[-1], error.get("detail"))
                if stop:
                    break
            else:
                answers.append(str(data.get("status", "ok")))
                if keep and data.get("status") == "begun":
                    begun.append(int(data["operation_id"]))
        self.findings[label] = answers
        return begun


PROBES = {"tool_flood": flood_probe}
