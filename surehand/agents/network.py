"""How command agents' programs reach out of their sandbox: ``SUREHAND_AGENT_NETWORK``.

- ``egress`` (the default): a network namespace of the program's own (loopback only). The
  portal (:mod:`surehand.agents.portal`), run first in it, relays the session server's
  address, the egress proxy's and each listed loopback destination's to the session's sockets
  in the worker's gateway (:mod:`surehand.agents.gateway`); the program gets ``HTTPS_PROXY``
  and ``HTTP_PROXY`` (both spellings) and ``NO_PROXY=localhost,127.0.0.1,::1``. It reaches
  what ``SUREHAND_AGENT_EGRESS`` and its preset list (:mod:`surehand.agents.egress`) and
  nothing else: no name resolves inside, and the worker's loopback, private networks and
  metadata addresses are refused unless listed exactly.
- ``none``: the same namespace, the session server and nothing else.
- ``host``: the worker's network, everything on its loopback included (the local API, the
  store, Redis, Flower, metrics): an explicit opt-in, warned about at start.

Without bwrap (``SUREHAND_AGENT_SANDBOX=none``) programs share the worker's network; asking
for ``egress`` or ``none`` explicitly there is a ConfigError (:func:`sandbox.sandbox_for`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from surehand.agents.egress import Allowlist
from surehand.agents.gateway import Gateway, SessionNet, SessionSpec
from surehand.agents.sandbox import BWRAP, EGRESS, HOST, Sandbox
from surehand.config import Settings

HOST_WARNING = (
    "WARNING: the worker's network: an agent reaches every service on this host's loopback "
    "and networks (the local API, the store, Redis, Flower, metrics)"
)


@dataclass(frozen=True)
class AgentNetwork:
    """The network every command agent's program of this process gets."""

    mode: str  # EGRESS, NONE or HOST, as the sandbox runs it
    sandboxed: bool  # in bwrap (else the worker's network, whatever the setting)
    egress: Allowlist | None
    connections: int
    idle: float
    owner: tuple[int, int] | None

    @classmethod
    def from_settings(
        cls, settings: Settings, box: Sandbox, owner: tuple[int, int] | None
    ) -> AgentNetwork:
        """Resolve the settings for ``box`` (ConfigError for a bad allowlist entry)."""
        egress = Allowlist.parse(settings.agent_egress, command_agent=settings.command_agent)
        own = box.own_network
        return cls(
            mode=box.network,
            sandboxed=box.mode == BWRAP,
            egress=egress if own and box.network == EGRESS else None,
            connections=settings.agent_connections,
            idle=settings.agent_idle_seconds,
            owner=owner,
        )

    @property
    def own(self) -> bool:
        """Whether programs get a network namespace of their own (egress, none)."""
        return self.sandboxed and self.mode != HOST

    @property
    def shares_host(self) -> bool:
        """Whether programs reach the worker's loopback (host, or no sandbox)."""
        return not self.own

    def describe(self) -> str:
        """What the programs' network reaches here (one line)."""
        if not self.sandboxed:
            return f"the worker's (SUREHAND_AGENT_SANDBOX=none): {HOST_WARNING}"
        if self.mode == HOST:
            return f"host (SUREHAND_AGENT_NETWORK=host): {HOST_WARNING}"
        if self.egress is None:
            return "none: a namespace of its own, the session MCP server and nothing else"
        return (
            "egress: a namespace of its own; the session MCP server, and out only through "
            f"the worker's proxy to {self.egress.describe()} (SUREHAND_AGENT_EGRESS); at most "
            f"{self.connections} connections at once per session"
        )

    @contextlib.contextmanager
    def session(self, label: str, mcp: tuple[int, Path] | None) -> Iterator[SessionNet | None]:
        """While inside, one session's ways out of its own namespace (None where it has
        none): ``mcp`` is the session server's port and Unix socket, ``label`` names the
        session in the log. They close, with every connection, when the block ends."""
        if not self.own:
            yield None
            return
        spec = SessionSpec(label, mcp, self.egress, self.connections, self.idle, self.owner)
        opened = Gateway.shared().open_session(spec)
        try:
            yield opened
        finally:
            opened.close()

    def portal(self, net: SessionNet | None) -> list[str]:
        """The portal's command line, run first in the sandbox (none without its network)."""
        if net is None or not net.forwards:
            return []
        forwards = [arg for forward in net.forwards for arg in ("--forward", forward.argument())]
        # This interpreter: the start check makes sure SUREHAND_AGENT_USER can run it
        # (launch.require_reachable), and the view binds it in.
        return [sys.executable, "-I", "-S", str(net.portal), *forwards, "--"]

    @staticmethod
    def binds(net: SessionNet | None) -> list[tuple[Path, bool]]:
        """What the sandbox binds in for ``net``: its directory of sockets, read-only."""
        return [] if net is None else [(net.directory, False)]
