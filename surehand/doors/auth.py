"""Bearer tokens to principals for the network doors (HTTP API, MCP over HTTP, console).

``SUREHAND_API_TOKENS`` maps bearer tokens to principals: ``token=name:ROLE:tenant,...``.
With no tokens configured there is exactly one principal, a local ADMIN in
``SUREHAND_TENANT``, and the doors refuse to bind anything but a loopback address, so an
unauthenticated API is never reachable from another machine, and it answers only loopback
clients that came straight to it (:class:`Peer`): a same-host reverse proxy in front of it does not
turn every remote caller into the local ADMIN. Wrong tokens are throttled per client and per
token (:mod:`surehand.doors.throttle`); a valid token always gets through.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from surehand.config import Settings
from surehand.doors.throttle import FailureThrottle, fingerprint
from surehand.errors import AuthError, ConfigError, Forbidden
from surehand.model import ADMIN
from surehand.principals import LOCAL_NAME, Principal
from surehand.requests import check_role, validate_tenant

MIN_TOKEN_LENGTH = 16  # what `surehand api`, `up` and `mcp --transport http` start with
# Headers a proxy adds: a request carrying one came through something that relays for others.
FORWARDING_HEADERS = frozenset({b"forwarded", b"x-forwarded-for", b"x-real-ip"})


def parse_tokens(spec: str) -> dict[str, Principal]:
    """Parse ``token=name:ROLE:tenant,...``; raise ConfigError naming the bad entry."""
    table: dict[str, Principal] = {}
    for raw in filter(None, (part.strip() for part in spec.split(","))):
        token, _, who = raw.partition("=")
        parts = who.split(":")
        if not token or len(parts) != 3 or not all(parts):
            raise ConfigError(
                "SUREHAND_API_TOKENS entries look like token=name:ROLE:tenant "
                f"(entry {len(table) + 1} does not)",
                setting="SUREHAND_API_TOKENS",
            )
        name, role, tenant = parts
        try:
            _check_name(name)
            check_role(role)
            validate_tenant(tenant)
        except ValueError as exc:
            raise ConfigError(
                f"SUREHAND_API_TOKENS entry for {name!r}: {exc}", setting="SUREHAND_API_TOKENS"
            ) from None
        table[token] = Principal(name, role, tenant)
    return table


def _check_name(name: str) -> None:
    """A principal's name is what the history records of its acts (``task_events.principal``)."""
    if len(name) > 64 or not name.isprintable():
        raise ValueError("the name must be at most 64 printable characters")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Peer:
    """The other end of a request as this server sees it: its address (the TCP peer's, or the
    one a proxy listed in SUREHAND_API_FORWARDED_ALLOW_IPS forwarded) and whether the request
    carries a proxy's forwarding headers (``relayed``)."""

    address: str
    relayed: bool = False

    @classmethod
    def of(cls, client: tuple[str, int] | None, headers: Iterable[tuple[bytes, bytes]]) -> Peer:
        """The peer of an ASGI request (``scope["client"]``, ``scope["headers"]``)."""
        relayed = any(name.lower() in FORWARDING_HEADERS for name, _value in headers)
        return cls(str(client[0]) if client else "unknown", relayed)

    @property
    def local(self) -> bool:
        """A loopback client that came straight here (not relayed by a proxy)."""
        return is_loopback(self.address) and not self.relayed


class Authenticator:
    """Turns an ``Authorization`` header into a :class:`Principal` (or raises AuthError)."""

    def __init__(self, settings: Settings) -> None:
        self.tokens: Mapping[str, Principal] = parse_tokens(settings.api_tokens)
        self.local = Principal(LOCAL_NAME, ADMIN, validate_tenant(settings.tenant))
        self._digests = [
            (hashlib.sha256(token.encode()).digest(), principal)
            for token, principal in self.tokens.items()
        ]
        self.throttle = FailureThrottle()

    def check_start(self, host: str, door: str) -> None:
        """What a serving command checks before it listens: no open door off loopback
        (:meth:`check_bind`) and no token shorter than :data:`MIN_TOKEN_LENGTH`."""
        self.check_bind(host, door)
        for token, principal in self.tokens.items():
            if len(token) < MIN_TOKEN_LENGTH:
                raise ConfigError(
                    f"SUREHAND_API_TOKENS: the token of {principal.name!r} has {len(token)} "
                    f"characters; use at least {MIN_TOKEN_LENGTH} random ones (for example "
                    '`python -c "import secrets; print(secrets.token_urlsafe(24))"`), so that '
                    "it cannot be guessed",
                    setting="SUREHAND_API_TOKENS",
                )

    @property
    def open(self) -> bool:
        """No tokens configured: every caller is the local ADMIN (loopback only)."""
        return not self.tokens

    def check_bind(self, host: str, door: str) -> None:
        """Refuse to serve without tokens on an address other machines can reach."""
        if self.open and not is_loopback(host):
            raise ConfigError(
                f"refusing to start {door} on {host} without SUREHAND_API_TOKENS: anyone who "
                "can reach it would act as ADMIN. Set tokens (token=name:ROLE:tenant) or bind "
                "127.0.0.1",
                setting="SUREHAND_API_TOKENS",
            )

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of ``Authorization: Bearer <token>``; AuthError if none matches."""
        if self.open:
            return self.local
        found = self._match(_bearer(authorization))
        if found is None:
            raise AuthError("the bearer token is not known to this server")
        return found

    def _match(self, token: str) -> Principal | None:
        """The principal of ``token``, comparing it with every configured token in constant
        time and never stopping early: the time taken says neither how much of a token was
        right nor which entry matched."""
        digest = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for known, principal in self._digests:
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    def authenticate_client(self, peer: Peer, authorization: str | None, door: str) -> Principal:
        """:meth:`authenticate` for a network request from ``peer``.

        Without tokens only a local peer is the local ADMIN (Forbidden otherwise). A valid
        token is accepted whatever its client did before; an unknown one is counted per client
        and per token, and a client or token that keeps failing gets TooManyAttempts (429) for
        a while instead of AuthError (401). Every failure is logged (``surehand.doors.throttle``).
        """
        if self.open:
            self.require_local(peer, door)
            return self.local
        return self.known(authorization) or self.refuse(peer, authorization, door)

    def known(self, authorization: str | None) -> Principal | None:
        """The principal of a valid ``Bearer`` token (None for anything else; nothing counted)."""
        scheme, _, token = (authorization or "").partition(" ")
        if self.open or scheme.lower() != "bearer" or not token.strip():
            return None
        return self._match(token.strip())

    def refuse(self, peer: Peer, authorization: str | None, door: str, hint: str = "") -> NoReturn:
        """Refuse a request whose credential is not valid: AuthError (401) without a bearer
        token; with one, the failure is counted (client and token) and the refusal is
        TooManyAttempts (429) once either keeps failing, else AuthError naming ``hint``."""
        token = _bearer(authorization)
        refusal = self.throttle.failed(peer.address, fingerprint(token), door)
        raise refusal or AuthError(hint or "the bearer token is not known to this server")

    def require_local(self, peer: Peer, door: str) -> None:
        """Forbidden unless ``peer`` is a loopback client that came straight here: what an
        open door (no tokens) answers only."""
        if not peer.local:
            how = "through a proxy" if peer.relayed else f"from {peer.address}"
            raise Forbidden(
                f"{door} has no tokens (SUREHAND_API_TOKENS), so it answers only loopback "
                f"clients that come straight to it, not requests {how}: set tokens to serve "
                "others"
            )


def _bearer(authorization: str | None) -> str:
    """The token of ``Bearer <token>`` (AuthError, not counted as a guess, without one)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("send Authorization: Bearer <token> (see SUREHAND_API_TOKENS)")
    return token.strip()
