"""Console sign-in: a bearer token exchanged once for a server-side session, and CSRF tokens.

A signed-in browser holds ``surehand_console`` (path ``/ui``, HttpOnly, SameSite=Lax, Secure
over HTTPS): a random session id, nothing else. The session -- principal, CSRF nonce, when it
started and when it was last used -- lives in this API process (:class:`SessionStore`), so
signing out ends it for every copy of the cookie, it ends after ``SUREHAND_CONSOLE_IDLE_SECONDS``
without a page opened (the live refresh does not count) and after
``SUREHAND_CONSOLE_SESSION_SECONDS`` in any case, and a restart ends them all.

SameSite=Lax, not Strict: a link to a case followed from chat or e-mail arrives with the
cookie and opens the case. Nothing a GET does changes anything, and every form carries the
session's CSRF token, so another site still cannot act for the user. A visitor who has not
signed in gets a separate, signed ``surehand_signin`` cookie holding only the sign-in form's
CSRF nonce: visiting the sign-in page never replaces (so never ends) a signed-in session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from fastapi import Request
from fastapi.responses import Response

from surehand.doors.auth import Authenticator, Peer
from surehand.errors import Forbidden
from surehand.principals import Principal

COOKIE = "surehand_console"
SIGN_IN_COOKIE = "surehand_signin"
PREFIX = "/ui"  # where the API mounts the console
COOKIE_PATH = PREFIX
ANONYMOUS_SECONDS = 3600
MAX_SESSIONS = 10_000  # per process; the least recently used go first beyond it
MAX_SESSIONS_PER_PRINCIPAL = 32  # browsers one token holder keeps signed in at once


class SignInRequired(Exception):
    """No valid signed-in session: the console answers with a redirect to its sign-in page."""


@dataclass(frozen=True)
class ConsoleSession:
    """A signed-in session as the server holds it."""

    csrf: str
    principal: Principal
    started: float
    last_used: float


class SessionStore:
    """The signed-in sessions of this process, by the SHA-256 of their cookie (thread-safe).

    At most :data:`MAX_SESSIONS_PER_PRINCIPAL` per principal (its least recently used go
    first), so one token holder signing in over and over evicts only its own sessions, and at
    most :data:`MAX_SESSIONS` in all."""

    def __init__(self, idle: float, longest: float, clock: Callable[[], float] = time.time) -> None:
        self.idle, self.longest, self._clock = idle, longest, clock
        self._sessions: dict[bytes, ConsoleSession] = {}  # least recently used first
        self._of: dict[Principal, dict[bytes, None]] = {}  # the same order, per principal
        self._lock = threading.Lock()

    def start(self, principal: Principal) -> tuple[str, ConsoleSession]:
        """A new session for ``principal``: the cookie value and the session."""
        sid, now = secrets.token_urlsafe(32), self._clock()
        session = ConsoleSession(secrets.token_urlsafe(24), principal, now, now)
        with self._lock:
            self._put(_digest(sid), session)
            own = self._of[principal]
            while len(own) > MAX_SESSIONS_PER_PRINCIPAL:
                self._drop(next(iter(own)))
            while len(self._sessions) > MAX_SESSIONS:
                self._drop(next(iter(self._sessions)))
        return sid, session

    def get(self, sid: str | None, *, touch: bool) -> ConsoleSession | None:
        """The live session of a cookie (None: none, ended, idle too long or too old);
        ``touch`` counts this request as use (a page opened, not a live refresh)."""
        if not sid:
            return None
        key, now = _digest(sid), self._clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if now - session.last_used > self.idle or now - session.started > self.longest:
                self._drop(key)
                return None
            if touch:
                session = replace(session, last_used=now)
                self._drop(key)
                self._put(key, session)  # the most recently used last
        return session

    def end(self, sid: str | None) -> None:
        """End a session: every copy of its cookie stops working."""
        if sid:
            with self._lock:
                self._drop(_digest(sid))

    def remaining(self, session: ConsoleSession) -> int:
        """Seconds the cookie should live: until the session's absolute end."""
        return max(0, int(session.started + self.longest - self._clock()))

    def _put(self, key: bytes, session: ConsoleSession) -> None:
        self._sessions[key] = session
        self._of.setdefault(session.principal, {})[key] = None

    def _drop(self, key: bytes) -> None:
        session = self._sessions.pop(key, None)
        if session is None:
            return
        own = self._of[session.principal]
        own.pop(key, None)
        if not own:
            del self._of[session.principal]


def _digest(sid: str) -> bytes:
    return hashlib.sha256(sid.encode()).digest()


class SignInCodec:
    """Signs the anonymous sign-in cookie (a CSRF nonce and an expiry) under a process key."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()

    def encode(self, nonce: str, expires: int) -> str:
        body = json.dumps({"c": nonce, "e": expires}, separators=(",", ":")).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def decode(self, value: str | None, now: float | None = None) -> str | None:
        """The nonce a valid, unexpired cookie holds (None if missing, forged or expired)."""
        try:
            body_part, _, mac_part = (value or "").partition(".")
            body = _unb64(body_part)
            if not hmac.compare_digest(_unb64(mac_part), self._mac(body)):
                return None
            data = json.loads(body)
            nonce, expires = str(data["c"]), int(data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        return nonce if expires > (now or time.time()) else None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _cookie(response: Response, request: Request, name: str, value: str, seconds: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=seconds,
        path=COOKIE_PATH,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


def set_session_cookie(response: Response, request: Request, sid: str, seconds: int) -> None:
    _cookie(response, request, COOKIE, sid, seconds)


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def set_sign_in_cookie(
    response: Response, request: Request, codec: SignInCodec, nonce: str
) -> None:
    """The anonymous sign-in cookie holding the sign-in form's CSRF ``nonce``."""
    expires = int(time.time()) + ANONYMOUS_SECONDS
    _cookie(response, request, SIGN_IN_COOKIE, codec.encode(nonce, expires), ANONYMOUS_SECONDS)


def clear_cookies(response: Response) -> None:
    for name in (COOKIE, SIGN_IN_COOKIE):
        response.delete_cookie(name, path=COOKIE_PATH, httponly=True, samesite="lax")


def peer_of(request: Request) -> Peer:
    """The client as the server sees it (the forwarded address behind a listed proxy), and
    whether a proxy relayed the request."""
    return Peer.of(request.scope.get("client"), request.scope.get("headers", ()))


def client_on_loopback(request: Request) -> bool:
    """True for a loopback client that came straight here (open local mode signs in only
    those)."""
    return peer_of(request).local


def sign_in(auth: Authenticator, request: Request, token: str) -> Principal:
    """The principal a sign-in names: the local ADMIN (open mode, loopback callers only) or the
    owner of ``token`` (AuthError if none; TooManyAttempts for a client or a token that keeps
    failing -- a valid token is accepted whatever its client did)."""
    door = "the open local console" if auth.open else "console sign-in"
    return auth.authenticate_client(peer_of(request), f"Bearer {token.strip()}", door)


def still_valid(auth: Authenticator, request: Request, principal: Principal) -> bool:
    """A signed-in principal still exists: its token is configured (or open mode, loopback)."""
    if auth.open:
        return principal == auth.local and client_on_loopback(request)
    return principal in set(auth.tokens.values())


def check_csrf(expected: str | None, submitted: object) -> None:
    """Forbidden unless the form's ``csrf_token`` is the session's nonce."""
    if expected is None or not isinstance(submitted, str) or not submitted:
        raise Forbidden("the form's CSRF token is missing; reload the page and submit again")
    if not hmac.compare_digest(expected.encode(), submitted.encode()):
        raise Forbidden("the form's CSRF token does not match; reload the page and submit again")


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a console path asked for, never another site (an open
    redirect would let any link send a freshly signed-in user anywhere)."""
    if not value or "\\" in value or any(ord(c) < 32 for c in value):
        return f"{PREFIX}/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not parts.path.startswith(f"{PREFIX}/"):
        return f"{PREFIX}/"
    if parts.path.startswith(f"{PREFIX}/sign-"):
        return f"{PREFIX}/"
    return value
