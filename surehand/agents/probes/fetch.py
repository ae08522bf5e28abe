"""A bounded GET for the HTTP probes, only to destinations the operator allows.

The URL comes from an agent's declaration, so it is treated like the agent's own traffic
(:mod:`surehand.agents.egress`): its host and port must be on the allowlist
(``SUREHAND_AGENT_EGRESS`` and ``SUREHAND_PROBE_EGRESS``), its name is resolved once here and
the connection goes to an address that was checked -- never the worker's loopback, a private
range or a metadata address unless an entry names it exactly. No redirect is followed, the
answer is read up to :data:`MAX_BYTES` and the whole exchange -- headers included -- is bounded
in time.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from surehand.agents.egress import Address, Allowlist, normalise

MAX_BYTES = 1024 * 1024


class Refused(Exception):
    """The destination is not allowed; the message says which setting would allow it."""


class Unreachable(Exception):
    """No answer within the bounds (connection refused, timeout, too large)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


@dataclass(frozen=True)
class Destinations:
    """Where the HTTP probes may go: the allowlist, and hosts the operator configured."""

    allowlist: Allowlist
    trusted: tuple[str, ...] = ()  # "host:port" of URLs the operator set (a forge's API)

    def check(self, host: str, port: int) -> list[Address]:
        """The addresses ``host:port`` may be reached at; Refused if none."""
        name = normalise(host)
        if f"{name}:{port}" in self.trusted:
            return _resolve(name, port)
        rule = self.allowlist.rule_for(name, port)
        if rule is None:  # refused before any lookup: a name off the list is never resolved
            raise Refused(
                f"{name}:{port} is not an allowed destination (SUREHAND_PROBE_EGRESS or "
                "SUREHAND_AGENT_EGRESS must list it)"
            )
        addresses = _resolve(name, port)
        admitted = [address for address in addresses if rule.admits(address)]
        if not admitted:
            raise Refused(
                f"{name}:{port} resolves to a non-public address ({addresses[0]}) that only an "
                "entry naming it exactly admits"
            )
        return admitted


def get(
    url: str,
    destinations: Destinations,
    *,
    headers: Mapping[str, str],
    timeout: float,
) -> Answer:
    """GET ``url`` (Refused / Unreachable)."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    host = parts.hostname or ""
    addresses = destinations.check(host, port)
    deadline = time.monotonic() + timeout
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connection = _Pinned(host, port, str(addresses[0]), secure, timeout)
    # The socket timeout bounds each receive, not the exchange: a server dripping its status
    # line and headers a byte at a time would hold the probe for hours. At the deadline the
    # socket is shut down, whatever is being read.
    watchdog = threading.Timer(timeout, _hang_up, (connection,))
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("GET", target, headers={"Host": parts.netloc, **headers})
        sock = connection.sock  # kept: the connection lets go of it once the answer says close
        response = connection.getresponse()
        return Answer(response.status, _read(sock, response, deadline))
    except (OSError, http.client.HTTPException) as error:
        if time.monotonic() >= deadline:
            raise Unreachable(f"no complete answer within {timeout:g} s") from None
        raise Unreachable(f"{type(error).__name__}: {error}") from None
    finally:
        watchdog.cancel()
        connection.close()


def _hang_up(connection: http.client.HTTPConnection) -> None:
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def _read(sock: socket.socket | None, response: http.client.HTTPResponse, deadline: float) -> bytes:
    """The body, one receive at a time, each bounded by the time left (a server that drips
    bytes cannot hold the probe past its deadline)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Unreachable("the answer took too long")
        if sock is not None:
            sock.settimeout(left)
        chunk = response.read1(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_BYTES:
            raise Unreachable(f"the answer is over {MAX_BYTES} bytes")
        chunks.append(chunk)


def _resolve(name: str, port: int) -> list[Address]:
    from ipaddress import ip_address

    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise Unreachable(f"{name} does not resolve ({error})") from None
    found = list(dict.fromkeys(ip_address(info[4][0]) for info in infos))
    if not found:
        raise Unreachable(f"{name} has no address")
    return found


class _Pinned(http.client.HTTPConnection):
    """An HTTP(S) connection to the checked address, with the URL's name for TLS."""

    def __init__(self, host: str, port: int, address: str, secure: bool, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.secure = secure

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        if self.secure:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        self.sock = sock
