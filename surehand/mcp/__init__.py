"""The MCP front door for agent hosts (Claude Code, Codex, Cursor): ``surehand mcp``.

Needs the ``mcp`` extra (``pip install 'surehand[mcp]'``, MCP Python SDK 2.x).
"""

from __future__ import annotations

from surehand.mcp.tools import build_server

__all__ = ["build_server"]
