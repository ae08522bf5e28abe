"""Console sign-in: a bearer token exchanged once for a signed session cookie, and CSRF tokens.

The cookie (``surehand_console``, path ``/ui``) is HttpOnly, SameSite=Strict, Secure over
HTTPS, and carries no token: only the principal (name, role, tenant), a CSRF nonce and an expiry,
signed with HMAC-SHA256 under a key this process draws at start (a restart signs everyone out).
A visitor who has not signed in gets an anonymous session too, so that the sign-in form carries
a CSRF token like every other form. Every request re-checks that the principal still exists
(its token is still configured, or the API is still open and the caller on loopback).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from surehand.errors import Forbidden
from surehand.principals import Authenticator, Principal, is_loopback

COOKIE = "surehand_console"
PREFIX = "/ui"  # where the API mounts the console
COOKIE_PATH = PREFIX
SESSION_SECONDS = 8 * 3600
ANONYMOUS_SECONDS = 3600


class SignInRequired(Exception):
    """No valid signed-in session: the console answers with a redirect to its sign-in page."""


@dataclass(frozen=True)
class ConsoleSession:
    """A decoded session cookie: the principal (None before sign-in) and its CSRF nonce."""

    csrf: str
    expires: int
    principal: Principal | None = None

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {"c": self.csrf, "e": self.expires}
        if self.principal is not None:
            who = self.principal
            data["p"] = [who.name, who.role, who.tenant]
        return data


class SessionCodec:
    """Signs and verifies session cookies under a per-process key."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()

    def encode(self, session: ConsoleSession) -> str:
        """``base64url(json).base64url(hmac)``."""
        body = json.dumps(session.payload(), separators=(",", ":")).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def decode(self, value: str | None, now: float | None = None) -> ConsoleSession | None:
        """The session a cookie holds, or None if it is missing, forged, malformed or expired."""
        try:
            body_part, _, mac_part = (value or "").partition(".")
            body = _unb64(body_part)
            if not hmac.compare_digest(_unb64(mac_part), self._mac(body)):
                return None
            data = json.loads(body)
            session = ConsoleSession(str(data["c"]), int(data["e"]), _principal(data.get("p")))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires > (now or time.time()) else None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _principal(value: Any) -> Principal | None:
    if value is None:
        return None
    name, role, tenant = (str(part) for part in value)
    return Principal(name, role, tenant)


def new_session(principal: Principal | None = None) -> ConsoleSession:
    """A fresh session with a new CSRF nonce (a sign-in always rotates it)."""
    seconds = SESSION_SECONDS if principal is not None else ANONYMOUS_SECONDS
    return ConsoleSession(secrets.token_urlsafe(24), int(time.time()) + seconds, principal)


def set_cookie(
    response: Response, request: Request, codec: SessionCodec, session: ConsoleSession
) -> None:
    """Write ``session`` as the console's cookie on ``response``."""
    response.set_cookie(
        COOKIE,
        codec.encode(session),
        max_age=max(0, session.expires - int(time.time())),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")


def client_on_loopback(request: Request) -> bool:
    """True if the TCP peer is a loopback address (open local mode signs in only those)."""
    return request.client is not None and is_loopback(request.client.host)


def sign_in(auth: Authenticator, request: Request, token: str) -> Principal:
    """The principal a sign-in names: the local ADMIN (open mode, loopback callers only) or the
    owner of ``token`` (AuthError if none)."""
    if auth.open:
        if not client_on_loopback(request):
            raise Forbidden("the open local console signs in loopback callers only")
        return auth.local
    return auth.authenticate(f"Bearer {token.strip()}")


def still_valid(auth: Authenticator, request: Request, principal: Principal) -> bool:
    """A signed-in principal still exists: its token is configured (or open mode, loopback)."""
    if auth.open:
        return principal == auth.local and client_on_loopback(request)
    return principal in set(auth.tokens.values())


def check_csrf(session: ConsoleSession | None, submitted: object) -> None:
    """Forbidden unless the form's ``csrf_token`` is the session's nonce."""
    if session is None or not isinstance(submitted, str) or not submitted:
        raise Forbidden("the form's CSRF token is missing; reload the page and submit again")
    if not hmac.compare_digest(session.csrf.encode(), submitted.encode()):
        raise Forbidden("the form's CSRF token does not match; reload the page and submit again")
