"""What other test modules need from ``tests/doors/test_session_hooks.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from typing import Any

import httpx

from surehand.agents.claude_hook import HookPolicy
from surehand.agents.presets import hook_url
from surehand.dispatcher.sessions import Session
from surehand.mcp.session_server import SessionMcp
from surehand.mcp.session_tools import Grant
from tests.shared.session_mcp import context_of

POLICY = HookPolicy(allowed=("mcp__surehand", "Bash"))


DEPLOY = {"command": "make deploy", "description": "ship it"}


def granted(mcp: SessionMcp, session: Session, hooks: HookPolicy | None = POLICY) -> Grant:
    return mcp.grant(context_of(session), hooks)


def hook(
    grant: Grant, event: str, call_id: str, tool_input: dict[str, Any], **more: Any
) -> httpx.Response:
    """One hook event as Claude Code posts it (its JSON, the session's token)."""
    payload = {
        "hook_event_name": event,
        "tool_name": more.pop("tool", "Bash"),
        "tool_input": tool_input,
        "tool_use_id": call_id,
        "permission_mode": "default",
        **more,
    }
    headers = {"Authorization": f"Bearer {grant.token}"}
    return httpx.post(hook_url(grant.url, event), json=payload, headers=headers, timeout=30)


def decision(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    output = response.json()["hookSpecificOutput"]
    return f"{output['permissionDecision']}: {output['permissionDecisionReason']}"
