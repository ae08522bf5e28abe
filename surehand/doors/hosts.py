"""Which ``Host`` names the network doors answer: the defence against DNS rebinding.

A web page can rebind its own name to 127.0.0.1 and so reach a loopback server from the
browser; its requests then carry the page's name in ``Host``. The HTTP API and MCP over HTTP
answer only loopback names (``127.0.0.1``, ``localhost``, ``[::1]``, with any port or none) and
the names listed in ``SUREHAND_API_ALLOWED_HOSTS`` (``name`` for any port, ``name:port`` for
one). Any other ``Host`` gets 421 before routing, authentication or parsing. An ``Origin``
header, when a browser sends one, must name an allowed host too (403 otherwise).

Both doors wrap their ASGI app in :class:`HostAllowlist`, so there is one rule, not two.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from surehand.config import Settings
from surehand.doors import problem
from surehand.errors import ConfigError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
SETTING = "SUREHAND_API_ALLOWED_HOSTS"


_LABEL = re.compile(r"\A(?!-)[a-z0-9_-]{1,63}(?<!-)\Z")


def split_host(value: str) -> tuple[str, str | None] | None:
    """``name[:port]`` → (lower-case name, port or None); IPv6 names keep their brackets.

    None for anything that is not exactly a host name (DNS labels), an IPv4 address or a
    bracketed IPv6 address, optionally with a port of digits: ``[::1]evil.com`` is not
    ``[::1]``, and an entry that can never match is refused rather than kept.
    """
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else None
        if (rest and port is None) or not _ipv6(name[1:]):
            return None
        return (f"{name}]", port) if port is None or _port(port) else None
    name, colon, port_text = value.partition(":")
    port = port_text if colon else None
    if not _hostname(name) or (port is not None and not _port(port)):
        return None
    return name, port


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _hostname(name: str) -> bool:
    labels = name.removesuffix(".").split(".")
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in labels)


def _port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


@dataclass(frozen=True)
class HostRule:
    """The allowed names (any port) and ``name:port`` pairs (that port only)."""

    names: frozenset[str]
    pairs: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, entries: Iterable[str]) -> HostRule:
        """Loopback names plus ``entries`` (ConfigError naming the setting for a bad one)."""
        names, pairs = set(LOOPBACK_NAMES), set()
        for entry in entries:
            parsed = split_host(entry)
            if parsed is None:
                raise ConfigError(
                    f"{SETTING} entries are host names, IP addresses ([::1] for IPv6) or "
                    f"name:port, not {entry!r}: it could never match a Host header",
                    setting=SETTING,
                )
            name, port = parsed
            if port is None:
                names.add(name)
            else:
                pairs.add((name, port))
        return cls(frozenset(names), frozenset(pairs))

    @classmethod
    def from_settings(cls, settings: Settings) -> HostRule:
        """The rule ``SUREHAND_API_ALLOWED_HOSTS`` asks for (comma list, added to loopback)."""
        return cls.of(
            filter(None, (part.strip() for part in settings.api_allowed_hosts.split(",")))
        )

    def allows(self, host: str | None) -> bool:
        """True if a ``Host`` header value names an allowed host."""
        parsed = split_host(host) if host else None
        if parsed is None:
            return False
        name, port = parsed
        return name in self.names or (port is not None and (name, port) in self.pairs)

    def allows_origin(self, origin: str | None) -> bool:
        """True if there is no ``Origin`` header, or it is ``http(s)://`` an allowed host."""
        if origin is None:
            return True
        parts = urlsplit(origin.strip())
        return parts.scheme in ("http", "https") and self.allows(parts.netloc)


class HostAllowlist:
    """ASGI wrapper: 421 for a ``Host`` the rule does not allow, 403 for such an ``Origin``."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # neither door serves websockets
            refusal = self.refusal(_header(scope, b"host"), _header(scope, b"origin"))
            if refusal is not None:
                await _send_problem(send, refusal)
                return
        await self.app(scope, receive, send)

    def refusal(self, host: str | None, origin: str | None) -> dict[str, Any] | None:
        """The problem to answer with, or None if the request may go on."""
        if not self.rule.allows(host):
            return problem.body(
                421,
                "host_not_allowed",
                "this server does not answer to that Host name (DNS rebinding protection); "
                f"use a loopback address, or add the name to {SETTING}",
                field="Host",
            )
        if not self.rule.allows_origin(origin):
            return problem.body(
                403,
                "origin_not_allowed",
                f"requests from that Origin are refused; add its host to {SETTING}",
                field="Origin",
            )
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def _send_problem(send: Send, document: dict[str, Any]) -> None:
    payload = json.dumps(document).encode()
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    await send({"type": "http.response.start", "status": document["status"], "headers": headers})
    await send({"type": "http.response.body", "body": payload})
