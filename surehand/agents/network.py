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
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from surehand.agents.egress import Allowlist
from surehand.agents.gateway import Gateway, SessionNet, SessionSpec
from surehand.agents.sandbox import BWRAP, EGRESS, HOST, Sandbox
from surehand.config import Settings
from surehand.errors import ConfigError

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
    python: str  # the interpreter the portal runs on (one the agent's user can run)

    @classmethod
    def from_settings(
        cls, settings: Settings, box: Sandbox, owner: tuple[int, int] | None
    ) -> AgentNetwork:
        """Resolve the settings for ``box`` (ConfigError for a bad allowlist entry, or a
        portal the agent's user could not start)."""
        egress = Allowlist.parse(settings.agent_egress, command_agent=settings.command_agent)
        own = box.own_network
        return cls(
            mode=box.network,
            sandboxed=box.mode == BWRAP,
            egress=egress if own and box.network == EGRESS else None,
            connections=settings.agent_connections,
            idle=settings.agent_idle_seconds,
            owner=owner,
            python=portal_python(owner) if own else sys.executable,
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
        return [self.python, "-I", "-S", str(net.portal), *forwards, "--"]

    @staticmethod
    def binds(net: SessionNet | None) -> list[tuple[Path, bool]]:
        """What the sandbox binds in for ``net``: its directory of sockets, read-only."""
        return [] if net is None else [(net.directory, False)]


def portal_python(owner: tuple[int, int] | None) -> str:
    """This interpreter, or where the agent's user cannot run it (a virtualenv of a home it
    cannot enter), the system's ``python3``: the portal needs only its C modules."""
    if owner is None or runnable(Path(sys.executable), owner):
        return sys.executable
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is not None and runnable(Path(system), owner):
        return system
    raise ConfigError(
        f"SUREHAND_AGENT_USER={owner[0]} can run neither {sys.executable} nor a python3 in "
        "/usr/bin, which its sandbox's network portal needs: install python3, or let that "
        "user reach this interpreter",
        setting="SUREHAND_AGENT_USER",
    )


def runnable(path: Path, owner: tuple[int, int]) -> bool:
    """Whether ``owner`` can execute ``path`` (links followed): every directory above it
    lets it through, and the file is executable for it."""
    target = path.resolve()
    if not target.is_file():
        return False
    return all(_allows(step, owner, 0o1) for step in [target, *target.parents])


def _allows(path: Path, owner: tuple[int, int], bit: int) -> bool:
    info = path.stat()
    if info.st_uid == owner[0]:
        return bool(info.st_mode & (bit << 6))
    if info.st_gid == owner[1]:
        return bool(info.st_mode & (bit << 3))
    return bool(info.st_mode & bit)
