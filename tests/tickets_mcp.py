"""A stand-in for an operator's own MCP server (a ticket tracker), run by the real Claude Code
over stdio in tests: its one tool appends the ticket to the file ``TICKETS_LEDGER`` names, so a
test can count how many times the effect really happened."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server: MCPServer[None] = MCPServer("tickets")


@server.tool()
def open_ticket(title: str) -> str:
    """Open a ticket with this title; answers its id."""
    ledger = Path(os.environ["TICKETS_LEDGER"])
    with ledger.open("a", encoding="utf-8") as file:
        file.write(f"{title}\n")
    return f"OPS-{len(ledger.read_text(encoding='utf-8').splitlines())}"


if __name__ == "__main__":
    server.run("stdio")
