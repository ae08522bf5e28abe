"""The egress proxy one session's program talks to (``HTTPS_PROXY``/``HTTP_PROXY``).

It answers on a Unix socket of the session (relayed into its sandbox by the portal) and admits
what :class:`~surehand.agents.egress.Allowlist` allows:

- ``CONNECT host:port`` (TLS, and any tunnel): ``200`` once connected, then bytes both ways;
- ``GET http://host[:port]/path`` and the other methods in absolute form (plain HTTP): the
  request goes on in origin form with ``Connection: close``, and its answer with the same, so
  one connection carries one request to one checked destination.

The name is resolved here, once; the connection goes to an address that passed the check
(never to the name resolved again). Anything else is answered ``403`` (not allowed), ``400``
(not a proxy request) or ``502`` (unreachable) with the reason in its text, and a refusal is
logged with the host and the TASK.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from surehand.agents import relay
from surehand.agents.egress import Address, Allowlist, normalise
from surehand.agents.relay import HEAD_END, pipe, read_head, refuse

log = logging.getLogger(__name__)

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
}
REFUSALS_LOGGED = 20  # per session; the rest are counted (a loop of refusals is no log flood)


class Refused(Exception):
    """A request the proxy does not carry: ``status`` and the reason told to the program."""

    def __init__(self, status: str, reason: str, *, logged: bool = True) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.logged = logged


@dataclass(frozen=True)
class Request:
    """A proxy request's head: where it goes and, for plain HTTP, the head to send there."""

    method: str
    host: str
    port: int
    head: bytes | None  # the origin-form head for plain HTTP; None for CONNECT


async def resolve(host: str, port: int) -> list[Address]:
    """The addresses ``host`` has now (itself, for an address); Refused ``502`` if none."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise Refused("502 Bad Gateway", f"{host} does not resolve ({error})") from None
    found = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    return list(dict.fromkeys(found))


@dataclass
class Proxy:
    """One session's proxy: its allowlist, its label for the log, and its refusals."""

    allowlist: Allowlist
    label: str  # "TASK-… attempt N"
    idle: float
    refused: int = 0
    resolver: Callable[[str, int], Awaitable[list[Address]]] = resolve  # tests: a fake DNS

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Carry one request (a relay handler, within the session's budget)."""
        try:
            request = parse(await read_head(reader))
            upstream = await self.connect(request)
        except Refused as refusal:
            self._note(refusal)
            await refuse(writer, refusal.status, refusal.reason)
            return
        if request.head is None:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await pipe((reader, writer), upstream, self.idle)
        else:  # the request's body goes on while its answer's head is awaited
            upstream[1].write(request.head)
            await pipe((reader, writer), upstream, self.idle, head=_answer)

    async def connect(self, request: Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to an address of ``request``'s host that the allowlist admits."""
        where = f"{request.host}:{request.port}"
        rule = self.allowlist.rule_for(request.host, request.port)
        if rule is None:
            raise Refused("403 Forbidden", f"{where} is not in SUREHAND_AGENT_EGRESS")
        addresses = await self.resolver(request.host, request.port)
        admitted = [address for address in addresses if rule.admits(address)]
        if not admitted:
            listed = ", ".join(map(str, addresses))
            raise Refused(
                "403 Forbidden",
                f"{where} resolves to {listed}: not public, and {rule} admits "
                "public addresses only",
            )
        return await _first_reachable(admitted, request.port, where)

    def _note(self, refusal: Refused) -> None:
        if not refusal.logged:
            return
        self.refused += 1
        if self.refused <= REFUSALS_LOGGED:
            log.warning("agent egress refused for %s: %s", self.label, refusal.reason)
        elif self.refused == REFUSALS_LOGGED + 1:
            log.warning("agent egress: %s keeps being refused; not logged further", self.label)


def parse(head: bytes) -> Request:
    """A proxy request's head (Refused ``400`` if it is none)."""
    lines = head[: -len(HEAD_END)].decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise Refused("400 Bad Request", "not an HTTP request", logged=False) from None
    if method == "CONNECT":
        host, port = _authority(target)
        return Request(method, host, port, None)
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise Refused(
            "400 Bad Request",
            "a proxy request names http://host/... (or CONNECT host:port for TLS)",
            logged=False,
        )
    try:
        port = parts.port or 80
    except ValueError:
        raise Refused("400 Bad Request", f"no port in {target!r}", logged=False) from None
    path = parts.path or "/"
    path += f"?{parts.query}" if parts.query else ""
    host = normalise(parts.hostname)
    # The Host header is the checked destination's: another would steer the request to another
    # site served at the same address.
    kept = _without(lines[1:], {*_HOP_BY_HOP, "host"})
    authority = parts.netloc.rpartition("@")[2]
    origin = [f"{method} {path} {version}", f"Host: {authority}", *kept, "Connection: close"]
    return Request(method, host, port, "\r\n".join([*origin, "", ""]).encode("latin-1"))


def _without(lines: list[str], names: set[str]) -> list[str]:
    """Header lines but those named ``names`` (lower case)."""
    return [line for line in lines if line.split(":", 1)[0].strip().lower() not in names]


def _authority(target: str) -> tuple[str, int]:
    host, colon, port = target.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) <= 65535:
        raise Refused("400 Bad Request", f"CONNECT names host:port, not {target!r}", logged=False)
    return normalise(host), int(port)


async def _first_reachable(
    addresses: list[Address], port: int, where: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    errors = []
    for address in addresses:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(str(address), port), relay.CONNECT_SECONDS
            )
        except (OSError, TimeoutError) as error:
            errors.append(f"{address}: {error or 'timed out'}")
    raise Refused("502 Bad Gateway", f"{where} cannot be reached ({'; '.join(errors)})")


async def _answer(upstream: asyncio.StreamReader) -> bytes:
    """The answer's head with ``Connection: close`` (this connection carries one request)."""
    head = await upstream.readuntil(HEAD_END)
    lines = head[: -len(HEAD_END)].decode("latin-1").split("\r\n")
    kept = _without(lines[1:], _HOP_BY_HOP)
    return "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
