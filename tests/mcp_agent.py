"""A scripted LLM-agent stand-in that speaks MCP to its session (the official ``mcp`` client).

    python tests/mcp_agent.py MODE

It connects to ``SUREHAND_MCP_URL`` with ``SUREHAND_MCP_TOKEN``, asks ``recovery_brief()``
(saved as ``brief-<attempt>.json`` in ``AGENT_TEST_DIR``), then creates one ticket as a
declared effect. The ticket "system" is the file ``ledger.txt`` in ``AGENT_TEST_DIR``: a line is
appended only when the agent really creates the ticket, so the ledger shows each effect once.
With ``AGENT_TICKET_KEY`` set, the effect is declared with that idempotency key under the
``keyed`` retry policy. Marker files (``<step>-<attempt>``) tell the test how far it got. Modes:

- ``hang_in_effect``: begin the effect, then wait to be killed (the effect's outcome unknown);
- ``hang_after_effect``: begin, create, end the effect, then wait to be killed on attempt 1
  (on a later attempt it returns);
- ``finish``: begin, create, end, and return its final message;
- ``forget_end``: begin, create, and return without ending the effect;
- ``keep_calling``: a hostile agent: saves its URL and token (``grant.json``), marks ``ready``,
  waits for the file ``go``, then calls ``effect_begin`` again and again whatever it is told
  (each answer appended to ``answers.txt``), ignores SIGTERM, and never returns on its own.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TICKET = {"project": "OPS", "title": "Rotate the API keys"}


def mark(step: str) -> None:
    attempt = os.environ["SUREHAND_ATTEMPT"]
    (Path(os.environ["AGENT_TEST_DIR"]) / f"{step}-{attempt}").write_text("", encoding="utf-8")


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    data = result.structured_content
    if result.is_error or not isinstance(data, dict):
        raise SystemExit(f"{tool} refused: {data}")
    return data


async def create_ticket(client: Client, hang_before_end: bool) -> str:
    declared: dict[str, Any] = {"name": "ticket.create", "args": TICKET}
    if key := os.environ.get("AGENT_TICKET_KEY"):  # the ticket system deduplicates on it
        declared |= {"idempotency_key": key, "retry_policy": "keyed"}
    begun = await call(client, "effect_begin", declared)
    mark(f"effect_{begun['status']}")
    if begun["status"] == "already_done":
        return f"ticket already created: {begun['receipt']}"
    ledger = Path(os.environ["AGENT_TEST_DIR"]) / "ledger.txt"
    with ledger.open("a", encoding="utf-8") as file:
        file.write(f"created {TICKET['title']} (attempt {os.environ['SUREHAND_ATTEMPT']})\n")
    if hang_before_end:
        hang("in_effect")
    if sys.argv[1] == "forget_end":
        return "created ticket OPS-1 (and forgot effect_end)"
    await call(
        client,
        "effect_end",
        {"operation_id": begun["operation_id"], "outcome": "succeeded", "receipt": "OPS-1"},
    )
    return "created ticket OPS-1"


def hang(step: str) -> None:
    mark(step)
    while True:  # until the test kills the worker (and with it this process group)
        time.sleep(1)


async def keep_calling(client: Client) -> None:
    # Hostile to the end: deaf to the worker's SIGTERM, so it is stopped only by the SIGKILL
    # after the grace, and never before it has written the answer it got.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    files = Path(os.environ["AGENT_TEST_DIR"])
    grant = {"url": os.environ["SUREHAND_MCP_URL"], "token": os.environ["SUREHAND_MCP_TOKEN"]}
    (files / "grant.json").write_text(json.dumps(grant), encoding="utf-8")
    mark("ready")
    while not (files / "go").exists():
        time.sleep(0.05)
    for _ in range(15):
        try:
            result = await client.call_tool("effect_begin", {"name": "x", "args": TICKET})
            answer = json.dumps(result.structured_content)
        except Exception as error:  # refused at the door: keeps calling anyway
            answer = f"{type(error).__name__}: {error}"
        with (files / "answers.txt").open("a", encoding="utf-8") as out:
            out.write(answer + "\n")
    hang("called")


async def main(mode: str) -> None:
    headers = {"Authorization": f"Bearer {os.environ['SUREHAND_MCP_TOKEN']}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(os.environ["SUREHAND_MCP_URL"], http_client=http)) as client,
    ):
        if mode == "keep_calling":
            await keep_calling(client)
        brief = await call(client, "recovery_brief", {})
        attempt = os.environ["SUREHAND_ATTEMPT"]
        out = Path(os.environ["AGENT_TEST_DIR"]) / f"brief-{attempt}.json"
        out.write_text(json.dumps(brief), encoding="utf-8")
        message = await create_ticket(client, hang_before_end=mode == "hang_in_effect")
    if mode == "hang_after_effect" and attempt == "1":
        hang("after_effect")
    print(message)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
