"""The agents' gateway: every connection a sandboxed program makes out of its sandbox.

One asyncio thread per worker process (:meth:`Gateway.shared`). For each session whose sandbox
has a network of its own it opens a private directory of Unix sockets (:meth:`open_session`),
bound into the sandbox, where the portal (:mod:`surehand.agents.portal`) relays the program's
loopback connections to them:

- ``mcp``: to the session MCP server (its URL, ``127.0.0.1:PORT``, works unchanged);
- ``proxy`` (egress mode): the allowlisting proxy (:mod:`surehand.agents.proxy`), the
  program's ``HTTPS_PROXY`` and ``HTTP_PROXY``;
- ``lo<N>`` (egress mode): each destination on the worker's loopback the allowlist names with
  its port (``127.0.0.1:8080``), which programs reach without the proxy (``NO_PROXY``).

A session's connections together are capped (``SUREHAND_AGENT_CONNECTIONS``; more wait
unaccepted in the kernel's backlog), a request's head must arrive within 10 s, and a
connection idle for ``SUREHAND_AGENT_IDLE_SECONDS`` is closed: one agent cannot spend the
worker's descriptors, and a sibling session keeps its own. The directory is the agent user's
alone (mode 0700) and goes, with every connection of the session, when the session ends.

The session MCP server's TCP port (what a program without a sandboxed network reaches) is
served here too (:meth:`listen`), with a cap of its own for all of them together.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from surehand.agents import relay
from surehand.agents.egress import LOOPBACK_NAMES, Allowlist
from surehand.agents.proxy import Proxy
from surehand.agents.relay import Budget, Handler

T = TypeVar("T")
PORTAL = Path(__file__).with_name("portal.py")
PROXY_PORT = 3128  # inside the sandbox's own namespace (the next free one if taken)
_CALL_SECONDS = 30.0
_UNIX_PATH_MAX = 100  # sun_path holds 108 bytes; a session's longest name is 4


@dataclass(frozen=True)
class Forward:
    """A loopback address inside the sandbox the portal relays to a Unix socket."""

    host: str
    port: int
    socket: Path

    def argument(self) -> str:
        """As the portal's ``--forward`` takes it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}={self.socket}"


@dataclass(frozen=True)
class SessionSpec:
    """What one session's network needs: whose it is and what it may reach."""

    label: str  # "TASK-… attempt N", for the log
    mcp: tuple[int, Path] | None  # the session server's port and Unix socket
    egress: Allowlist | None  # None: no way out (SUREHAND_AGENT_NETWORK=none)
    connections: int
    idle: float
    owner: tuple[int, int] | None = None  # the agent's uid and gid


@dataclass
class SessionNet:
    """One session's sockets; :meth:`close` when the session ends."""

    directory: Path
    forwards: list[Forward]
    env: dict[str, str]
    portal: Path  # the portal's script, in the directory: the agent's user can read it
    gateway: Gateway
    budget: Budget
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    listeners: list[socket.socket] = field(default_factory=list)

    def close(self) -> None:
        """Stop listening, cut the session's connections, remove its directory."""
        self.gateway.call(self._close())
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.budget.close_all()
        for listener in self.listeners:
            listener.close()  # once nothing waits on it


class Gateway:
    """This process's gateway thread and the sessions' socket directories under it."""

    _shared: ClassVar[dict[int, Gateway]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.root = Path(tempfile.mkdtemp(prefix="surehand-gw-", dir=_short_temp()))
        self.root.chmod(0o711)  # an agent user may pass through to its own directory
        self.portal = self.root / PORTAL.name  # linked into each session's directory
        shutil.copyfile(PORTAL, self.portal)
        self.portal.chmod(0o644)
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="surehand-gateway", daemon=True
        )
        self._thread.start()
        atexit.register(shutil.rmtree, self.root, True)

    @classmethod
    def shared(cls) -> Gateway:
        """The gateway of this process (started on first use; a forked child gets its own)."""
        with cls._shared_lock:
            pid = os.getpid()
            if pid not in cls._shared:
                cls._shared[pid] = cls()
            return cls._shared[pid]

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the gateway's loop and wait for its result."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(_CALL_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def listen(
        self, listener: socket.socket, target: Path, *, connections: int, idle: float, owner: str
    ) -> Callable[[], None]:
        """Relay ``listener``'s connections (a TCP port) to the Unix socket ``target``, at
        most ``connections`` at once, each request's head within 10 s; the function that
        stops it (and closes ``listener``)."""
        listener.setblocking(False)
        handler = _to_unix(target, idle)

        async def start() -> asyncio.Task[None]:
            budget = Budget(connections, owner)
            return asyncio.create_task(relay.accept({listener: handler}, budget))

        task = self.call(start())

        async def cancel() -> None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            listener.close()  # once nothing waits on it

        return lambda: self.call(cancel())

    def open_session(self, spec: SessionSpec) -> SessionNet:
        """The directory of sockets for one session, listening (see the module's text)."""
        directory = self.root / secrets.token_hex(8)
        directory.mkdir(mode=0o700)
        try:
            os.link(self.portal, directory / PORTAL.name)
            if spec.owner is not None:
                os.chown(directory, *spec.owner)
            return self.call(self._open(spec, directory))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    async def _open(self, spec: SessionSpec, directory: Path) -> SessionNet:
        budget = Budget(spec.connections, f"the session of {spec.label}")
        net = SessionNet(directory, [], {}, directory / PORTAL.name, self, budget)
        handlers = {}
        try:
            for host, port, name, handler in _routes(spec):
                handlers[_listen_unix(directory / name, net.listeners)] = handler
                net.forwards.append(Forward(host, port, directory / name))
        except BaseException:
            await net._close()
            raise
        net.tasks.append(asyncio.create_task(relay.accept(handlers, budget)))
        proxy = next((f for f in net.forwards if f.socket.name == "proxy"), None)
        if proxy is not None:
            net.env = proxy_env(f"http://127.0.0.1:{proxy.port}")
        return net


def _listen_unix(path: Path, opened: list[socket.socket]) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    opened.append(listener)
    listener.bind(str(path))
    path.chmod(0o666)  # its directory is the agent user's alone
    listener.listen(128)
    listener.setblocking(False)
    return listener


def _routes(spec: SessionSpec) -> list[tuple[str, int, str, Handler]]:
    """(address inside the sandbox, port, socket name, handler) for each way out."""
    routes: list[tuple[str, int, str, Handler]] = []
    if spec.mcp is not None:
        routes.append(("127.0.0.1", spec.mcp[0], "mcp", _to_unix(spec.mcp[1], spec.idle)))
    if spec.egress is None:
        return routes
    loopback = spec.egress.loopback_forwards()
    for number, (host, port) in enumerate(loopback):
        routes.append((host, port, f"lo{number}", _to_tcp(host, port, spec.idle)))
    taken = {port for _host, port, _name, _handler in routes}
    port = next(p for p in range(PROXY_PORT, 65536) if p not in taken)
    proxy = Proxy(spec.egress, spec.label, spec.idle)
    routes.append(("127.0.0.1", port, "proxy", proxy.serve))
    return routes


def proxy_env(url: str) -> dict[str, str]:
    """What tells a program to go out through the proxy at ``url`` (both spellings), and to
    reach loopback (the session server, listed loopback destinations) directly."""
    direct = ",".join(LOOPBACK_NAMES)
    return {
        "HTTPS_PROXY": url,
        "HTTP_PROXY": url,
        "https_proxy": url,
        "http_proxy": url,
        "NO_PROXY": direct,
        "no_proxy": direct,
    }


def _to_unix(target: Path, idle: float) -> Handler:
    """Relay HTTP to the Unix socket ``target``: a request's head first, within 10 s."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await relay.read_head(reader)
        upstream = await asyncio.wait_for(
            asyncio.open_unix_connection(str(target)), relay.CONNECT_SECONDS
        )
        upstream[1].write(head)
        await relay.pipe((reader, writer), upstream, idle)

    return serve


def _to_tcp(host: str, port: int, idle: float) -> Handler:
    """Relay bytes to ``host:port`` on the worker's loopback (a listed destination)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await asyncio.wait_for(
            asyncio.open_connection(host, port), relay.CONNECT_SECONDS
        )
        await relay.pipe((reader, writer), upstream, idle)

    return serve


def _short_temp() -> str:
    """A temporary directory whose socket paths fit ``sun_path`` (a long TMPDIR does not)."""
    chosen = tempfile.gettempdir()
    return chosen if len(chosen) + 40 < _UNIX_PATH_MAX else "/tmp"
