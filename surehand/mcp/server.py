"""What surehand's MCP servers share: strict tools, problem documents as tool errors.

Both the public door (:mod:`surehand.mcp.tools`) and the session server
(:mod:`surehand.mcp.session_server`) build on this; it imports neither the facade nor the
dispatcher, so either server can be built without the other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from pydantic import ConfigDict, ValidationError

from surehand.doors import problem


def result(data: dict[str, Any], *, error: bool = False) -> CallToolResult:
    """Structured content, and the same as JSON text for hosts that read only text."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=data, is_error=error
    )


def error_result(document: dict[str, Any]) -> CallToolResult:
    """A tool error carrying the problem document (the HTTP API's error shape)."""
    return result({"error": document}, error=True)


class SurehandServer(MCPServer[Any]):
    """``MCPServer`` whose refused arguments come back as a problem, not as free text."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Run the tool; arguments its model refuses answer ``{"error": problem}``."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return error_result(problem.for_validation(exc.__cause__.errors()))
            if self._tool_manager.get_tool(name) is None:
                return error_result(problem.body(404, "unknown_tool", f"no tool named {name!r}"))
            raise


def strict_tool(fn: Callable[..., Any], name: str, **options: Any) -> Tool:
    """A tool for ``fn`` that refuses arguments it does not have (schema and validation)."""
    tool = Tool.from_function(fn, name=name, **options)
    loose = tool.fn_metadata.arg_model
    namespace = {"model_config": ConfigDict(extra="forbid"), "__module__": loose.__module__}
    tool.fn_metadata.arg_model = type(loose.__name__, (loose,), namespace)
    tool.parameters["additionalProperties"] = False
    return tool
