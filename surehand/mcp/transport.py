"""Running the MCP server: over stdio (what agent hosts spawn) or streamable HTTP.

Over stdio the caller is the local user (``SUREHAND_TENANT``), like the CLI. Over HTTP the same
bearer tokens as the HTTP API apply (``SUREHAND_API_TOKENS``): every request without a known
token gets 401 before it reaches the MCP session, and without tokens the server refuses to bind
anything but loopback. The ``Host`` rule is the HTTP API's (:mod:`surehand.doors.hosts`): 421 for a
name that is not loopback or listed in ``SUREHAND_API_ALLOWED_HOSTS``, whatever the bind address.
Refusals are problem documents, as everywhere else.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from surehand.doors import problem
from surehand.doors.auth import Authenticator, Peer
from surehand.doors.hosts import HostAllowlist, HostRule
from surehand.doors.serving import serve
from surehand.errors import AuthError
from surehand.mcp.tools import build_server

if TYPE_CHECKING:
    from surehand.facade import Surehand

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]

MCP_PATH = "/mcp"


def run_stdio(sh: Surehand) -> None:
    """Serve MCP on stdin/stdout until the host closes stdin."""
    # stdout is the protocol channel: keep every log line on stderr, and quiet.
    logging.basicConfig(level=logging.WARNING)
    build_server(sh).run("stdio")


class RequireToken:
    """ASGI wrapper: 401 for HTTP requests without a known bearer token (when tokens exist),
    429 for a client or token that keeps failing, 403 for anyone but a loopback client that
    came straight here when there are no tokens."""

    def __init__(self, app: ASGIApp, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers", [])
            header = next((v.decode("latin-1") for k, v in headers if k == b"authorization"), None)
            peer = Peer.of(scope.get("client"), headers)
            try:
                self.auth.authenticate_client(peer, header, "MCP over HTTP")
            except AuthError as error:
                await _unauthorized(send, error)
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: Callable[[Message], Awaitable[None]], error: AuthError) -> None:
    document = problem.for_error(error)
    body = json.dumps(document).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if document["status"] == 401:
        headers.append((b"www-authenticate", b'Bearer realm="surehand"'))
    if "retry_after" in document:
        headers.append((b"retry-after", str(document["retry_after"]).encode()))
    await send({"type": "http.response.start", "status": document["status"], "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_app(server: MCPServer[Any], auth: Authenticator, hosts: HostRule) -> ASGIApp:
    """The streamable HTTP app at ``/mcp``, behind the Host check, then the token check."""
    # The SDK's own Host check is off: HostAllowlist applies surehand's one rule instead.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, transport_security=security)
    return HostAllowlist(RequireToken(app, auth), hosts)


def run_http(host: str, port: int, sh: Surehand) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` until SIGINT/SIGTERM."""
    surehand = sh
    auth = Authenticator(surehand.settings)
    auth.check_start(host, "the MCP HTTP server")
    app = http_app(build_server(surehand), auth, HostRule.from_settings(surehand.settings))
    serve(
        app,
        host,
        port,
        log_level="warning",
        setting="SUREHAND_MCP_PORT",
        announce=_listening,
        forwarded_allow_ips=surehand.settings.api_forwarded_allow_ips,
    )


def _listening(url: str) -> None:
    # stderr: the one line a person (or a script waiting for the server) looks for.
    print(
        f"surehand MCP (streamable HTTP) listening on {url}{MCP_PATH}", file=sys.stderr, flush=True
    )
