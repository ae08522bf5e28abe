"""The session MCP server: one per worker process, offered to every command agent's session.

It serves streamable HTTP in a daemon thread of the process that runs the sessions, started
with the worker (or the first session), on a Unix socket in a directory of this user's alone;
each sandbox with a network of its own reaches it through a relay of the agents' gateway
(:mod:`surehand.agents.gateway`, capped per session), and the port on 127.0.0.1 (an ephemeral
one, or the first free one of ``SUREHAND_SESSION_MCP_PORTS``), which programs that share the
worker's network reach, is a gateway relay too, with a cap for all of them together and a
10 s deadline for a request's head: no program can spend this process's descriptors.

It is named ``surehand-session`` (the operator's server, :mod:`surehand.mcp.tools`, is
``surehand``); agent CLIs name its tools after the key of their MCP configuration instead,
which stays ``surehand`` (``mcp__surehand__effect_begin``).
Each session gets a grant: a random bearer token bound to its attempt, and a URL naming its TASK,
``http://127.0.0.1:PORT/tasks/<task_id>/mcp``. The command agent hands both to its program
(``SUREHAND_MCP_URL``, ``SUREHAND_MCP_TOKEN``, and MCP config files the agent CLIs read) and
revokes the grant when the session ends, so a token dies with its attempt.

In front of the MCP app: the Host rule of the other network doors (loopback names only, 421
otherwise), then the grant check: no known token is 401 (a revoked one says why it was revoked),
a token used on another TASK's URL is 403. Both answer a JSON-RPC error whose ``message`` is the
reason and whose ``data`` is the problem document, as ``application/json``: that is what MCP
clients show (the official client replaces any other error body with "Server returned an
error response"). Behind it, every tool call is fenced in the store
(:mod:`surehand.mcp.session_tools`): the token is who may ask, the store's epoch decides
whether the write applies, and the session's budget how much it may write
(:mod:`surehand.mcp.session_state`). The same gate answers Claude Code's ``http`` hooks at
``/tasks/<task_id>/hooks/<event>`` (:mod:`surehand.mcp.session_hooks`), by the grant's hook
policy.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, ClassVar

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST, ToolAnnotations

from surehand import __version__, logjson
from surehand.agents.claude_hook import HookPolicy
from surehand.agents.context import SessionContext
from surehand.agents.gateway import Gateway
from surehand.agents.session_door import AgentGrant
from surehand.dispatcher.context import Services
from surehand.dispatcher.sessions import Session
from surehand.doors import problem
from surehand.doors.hosts import HostAllowlist, HostRule
from surehand.doors.limits import BodyLimit
from surehand.doors.serving import bind_in, bind_unix, url_of
from surehand.errors import ConfigError
from surehand.mcp.server import SurehandServer, strict_tool
from surehand.mcp.session_hooks import GRANT_KEY, SessionHooks
from surehand.mcp.session_state import SessionBudget, SessionLimits
from surehand.mcp.session_tools import INSTRUCTIONS, Grant, SessionTools, bearer

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Any, Send], Awaitable[None]]

HOST = "127.0.0.1"
# The name it advertises. Agent CLIs prefix its tools with the key of their MCP configuration
# (presets.SERVER_NAME, "surehand": mcp__surehand__...), not with this name.
SERVER_NAME = "surehand-session"
MCP_PATH = "/mcp"
HOOKS_PATH = "/hooks/"  # Claude Code's hooks: /tasks/<task_id>/hooks/<event>
PORTS_SETTING = "SUREHAND_SESSION_MCP_PORTS"
_REVOKED_KEPT = 4096  # why recently revoked tokens were revoked (told when they come back)
_START_SECONDS = 15.0


class Grants:
    """The live grants of this process, by token, and why recent ones ended (thread-safe)."""

    def __init__(self) -> None:
        self._by_token: dict[str, Grant] = {}
        self._revoked: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, grant: Grant) -> None:
        with self._lock:
            self._by_token[grant.token] = grant

    def revoke(self, token: str, why: str) -> None:
        """End ``token``; ``why`` is told to whoever presents it again (the first reason
        stands: a session stopped as stale stays stale when it then ends)."""
        with self._lock:
            self._by_token.pop(token, None)
            self._revoked.setdefault(token, why)
            while len(self._revoked) > _REVOKED_KEPT:
                self._revoked.popitem(last=False)

    def get(self, token: str | None) -> Grant | None:
        with self._lock:
            return self._by_token.get(token) if token else None

    def why_revoked(self, token: str | None) -> str | None:
        with self._lock:
            return self._revoked.get(token) if token else None


class GrantGate:
    """ASGI: a request must carry a live grant's token, on its own TASK's URL; ``hooks`` answers
    its ``/hooks/<event>`` (with the grant in the scope), ``app`` its ``/mcp``."""

    def __init__(self, app: ASGIApp, grants: Grants, hooks: ASGIApp | None = None) -> None:
        self.app = app
        self.grants = grants
        self.hooks = hooks

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = bearer(_header(scope, b"authorization"))
        grant = self.grants.get(token)
        task_id, rest = _task_of(scope["path"])
        if grant is None:
            why = self.grants.why_revoked(token) or "unknown MCP token, or its attempt ended"
            await _refuse(send, 401, "unauthorized", why)
        elif task_id != grant.task_id:
            await _refuse(send, 403, "forbidden", f"this token acts on {grant.task_id} only")
        elif rest.startswith(HOOKS_PATH) and self.hooks is not None:
            await self.hooks({**scope, "path": rest, GRANT_KEY: grant}, receive, send)
        else:
            await self.app(
                {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode()}, receive, send
            )


def _header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == name), None)


def _task_of(path: str) -> tuple[str | None, str]:
    """``/tasks/<task_id>/mcp`` or ``/tasks/<task_id>/hooks/<event>`` → the task id and the
    rest (``/mcp``, ``/hooks/<event>``); else (None, "")."""
    parts = path.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "tasks" and parts[2] == "mcp":
        return parts[1], MCP_PATH
    if len(parts) == 4 and parts[0] == "tasks" and f"/{parts[2]}/" == HOOKS_PATH:
        return parts[1], f"{HOOKS_PATH}{parts[3]}"
    return None, ""


async def _refuse(send: Send, status: int, code: str, detail: str) -> None:
    """A JSON-RPC error at HTTP ``status``: clients show its message, the reason itself."""
    error = {"code": INVALID_REQUEST, "message": detail, "data": problem.body(status, code, detail)}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_session_server(tools: SessionTools) -> MCPServer[Any]:
    """The MCP server with the session tools (arguments a tool does not have are refused)."""
    idempotent = ToolAnnotations(
        idempotent_hint=True, destructive_hint=False, open_world_hint=False
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    listed = [
        strict_tool(tools.effect_begin, "effect_begin", annotations=idempotent),
        strict_tool(tools.effect_end, "effect_end", annotations=idempotent),
        strict_tool(tools.report, "report", annotations=idempotent),
        strict_tool(tools.progress, "progress", annotations=idempotent),
        strict_tool(tools.delegate, "delegate", annotations=idempotent),
        strict_tool(tools.wait_for, "wait_for", annotations=idempotent),
        strict_tool(tools.recovery_brief, "recovery_brief", annotations=read_only),
    ]
    return SurehandServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        tools=listed,
    )


class SessionMcp:
    """This process's session MCP server for one store; :meth:`shared` gives the one to use."""

    # By (pid, store URL): a forked child (a prefork pool's) starts a server of its own.
    _shared: ClassVar[dict[tuple[int, str], SessionMcp]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, services: Services) -> None:
        self.services = services
        self.grants = Grants()
        self._server: UnixServer | None = None
        self._port = 0
        self._stop_port: Callable[[], None] | None = None
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, services: Services) -> SessionMcp:
        """The server of this process for the store of ``services`` (a runtime's), created
        once on the first runtime's store and settings. It closes nothing of theirs: the
        runtime that owns the store disposes of it (a disposed store reconnects on demand)."""
        key = (os.getpid(), services.store.url)
        with cls._shared_lock:
            if key not in cls._shared:
                # Not the runtime's publishers: the server outlives the runtime that started
                # it, and what a grant without the runner's services creates the sweep sends.
                own = Services(store=services.store, settings=services.settings)
                cls._shared[key] = cls(own)
            return cls._shared[key]

    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, starting the server on first use."""
        self._started()
        return url_of(HOST, self._port)

    def door(self) -> tuple[int, Path]:
        """The server's port and its Unix socket (what sandboxes' own networks relay to)."""
        server = self._started()
        return self._port, server.path

    def _started(self) -> UnixServer:
        """Serve on a Unix socket in a directory of this user's alone (what each sandbox's
        relay reaches) and on the TCP port through the agents' gateway (what a program
        sharing the worker's network reaches), whose cap and timeouts bound what programs
        can hold of this process's descriptors."""
        with self._lock:
            if self._server is None:
                listening = bind_in(HOST, self.ports(), setting=PORTS_SETTING)
                socket_path = Path(tempfile.mkdtemp(prefix="surehand-mcp-")) / "mcp.sock"
                self._server = UnixServer(self.app(), socket_path).start()
                self._port = listening.getsockname()[1]
                settings = self.services.settings
                self._stop_port = Gateway.shared().listen(
                    listening,
                    socket_path,
                    connections=2 * settings.agent_connections,
                    idle=settings.agent_idle_seconds,
                    owner=f"the session MCP server's port {self._port}",
                )
                log.info("session MCP server listening on %s", url_of(HOST, self._port))
            return self._server

    def ports(self) -> range:
        """The ports it may listen on (``SUREHAND_SESSION_MCP_PORTS``; port 0: any free one)."""
        return ports_of(self.services.settings.session_mcp_ports)

    def app(self) -> ASGIApp:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        tools = SessionTools(self.grants.get, self.grants.revoke)
        server = build_session_server(tools)
        mcp_app = server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
        )
        gate = GrantGate(mcp_app, self.grants, hooks=SessionHooks(tools))
        gated = HostAllowlist(gate, HostRule.of(()))
        # Refused before anything parses it, like the API's: a REPORT body is at most 1 MiB.
        limit = self.services.settings.api_max_body_bytes
        return BodyLimit(gated, limit, what="a tool call's arguments; a REPORT is at most 1 MiB")

    def grant(self, ctx: SessionContext, hooks: HookPolicy | None = None) -> Grant:
        """A new grant for ``ctx``'s attempt, with its budget and (for Claude Code) what its
        hooks decide by; revoke it when the session ends."""
        token = secrets.token_urlsafe(32)
        # The runner's services when it gave them (its publisher sends a delegated child at
        # once); this server's own otherwise (the sweep publishes what they create).
        services = ctx.services if isinstance(ctx.services, Services) else self.services
        session = Session(services=services, task=ctx.task, attempt=ctx.attempt)
        url = f"{self.base_url()}/tasks/{ctx.task.task_id}{MCP_PATH}"
        grant = Grant(
            token=token,
            url=url,
            session=session,
            cancelled=lambda: ctx.cancelled,
            stop=ctx.stop,
            hooks=hooks,
            budget=SessionBudget(SessionLimits.from_settings(self.services.settings)),
        )
        self.grants.add(grant)
        return grant

    def revoke(self, grant: AgentGrant) -> None:
        """End ``grant``: its token is refused (401) from now on."""
        self.grants.revoke(grant.token, "this token's session has ended; it acts no more")

    def stop(self) -> None:
        """Stop serving (tests; a worker's server ends with its process)."""
        with self._lock:
            if self._stop_port is not None:
                self._stop_port()
                self._stop_port = None
            if self._server is not None:
                self._server.stop()
                shutil.rmtree(self._server.path.parent, ignore_errors=True)
                self._server = None


class UnixServer:
    """uvicorn on a Unix socket only, in a daemon thread (nothing else can reach it: its
    directory is this user's alone, and sandboxes get relays to it, never the socket)."""

    def __init__(self, app: ASGIApp, path: Path) -> None:
        self.path = path
        self.socket = bind_unix(path)
        config = uvicorn.Config(
            app,
            log_level="warning",
            log_config=logjson.uvicorn_log_config() or uvicorn.config.LOGGING_CONFIG,
            access_log=False,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="surehand-session-mcp"
        )
        self.thread.daemon = True

    def start(self) -> UnixServer:
        """Start serving; ConfigError if uvicorn does not start within 15 s."""
        self.thread.start()
        deadline = time.monotonic() + _START_SECONDS
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the session MCP server did not start on {self.path}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Finish in-flight requests, then close the socket."""
        self.server.should_exit = True
        self.thread.join(10.0)
        self.socket.close()


def ports_of(text: str) -> range:
    """``FIRST-LAST`` or ``PORT`` as a range of ports; empty: ``range(0, 1)`` (any free port).
    ConfigError naming the setting for a range that is empty or beyond 65535."""
    first, _, last = text.replace(" ", "").partition("-")
    if not first:
        return range(0, 1)
    low, high = int(first), int(last or first)
    if not 0 < low <= high <= 65535:
        raise ConfigError(
            f"{PORTS_SETTING}={text!r} is no port range: write FIRST-LAST with "
            "0 < FIRST <= LAST <= 65535 (e.g. 41000-41099), or leave it empty for any free port",
            setting=PORTS_SETTING,
        )
    return range(low, high + 1)
