"""What a command agent needs from a session server, and nothing more.

The session MCP server lives with the other MCP door (:mod:`surehand.mcp.session_server`) and
depends on the dispatcher; agents sit below both. So a command agent does not import the
server: whoever builds the agent (the runtime, ``surehand check``, a test) hands it a
:data:`SessionDoorFactory`, and the agent sees only these two protocols.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from surehand.agents.claude_hook import HookPolicy
from surehand.agents.context import SessionContext
from surehand.config import Settings


class AgentGrant(Protocol):
    """One session's right to its tools: the URL and bearer token its program is given."""

    @property
    def token(self) -> str: ...

    @property
    def url(self) -> str: ...


class SessionDoor(Protocol):
    """A process's session server: grants per attempt, revoked when the session ends."""

    def grant(self, ctx: SessionContext, hooks: HookPolicy | None = None) -> AgentGrant:
        """A new grant for ``ctx``'s attempt; ``hooks``: what Claude Code's hooks decide by
        (None: the session has no hooks)."""
        ...

    def revoke(self, grant: AgentGrant) -> None:
        """End ``grant``: its token is refused from now on."""
        ...

    def door(self) -> tuple[int, Path]:
        """The server's loopback port and Unix socket (what each sandbox's own network is
        relayed to)."""
        ...


SessionDoorFactory = Callable[[Settings], SessionDoor]
"""Gives the session server of this process to an agent built with these settings (one per
process and store; a runtime's factory serves on the runtime's store, see
``surehand.runtime.session_door``)."""
