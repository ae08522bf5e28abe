"""Throttling of failed sign-ins, shared by the network doors (console sign-in, API tokens).

A client (its address as the server sees it: the TCP peer, or the forwarded address from a
proxy listed in ``SUREHAND_API_FORWARDED_ALLOW_IPS``) that fails ``allowed`` times within
``window`` seconds is refused -- every attempt, a right token included -- for ``lockout``
seconds, doubling with each further lockout up to ``longest``. Every failure is logged with
the client's address and its count, never with the token. A success clears the client's count.

Kept in the process's memory: a restart forgets it, and several API processes each count on
their own (the bound per process still holds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from surehand.errors import TooManyAttempts

log = logging.getLogger(__name__)
MAX_CLIENTS = 100_000  # forget the oldest beyond this: memory stays bounded under a flood


@dataclass
class _Record:
    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0
    lockouts: int = 0


class FailureThrottle:
    """Counts failures per client and refuses clients over the limit (thread-safe)."""

    def __init__(
        self,
        *,
        allowed: int = 5,
        window: float = 60.0,
        lockout: float = 30.0,
        longest: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed, self.window, self.lockout, self.longest = allowed, window, lockout, longest
        self._clock = clock
        self._clients: dict[str, _Record] = {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """TooManyAttempts (with ``retry_after`` seconds) while ``client`` is locked out."""
        with self._lock:
            record = self._clients.get(client)
            wait = record.locked_until - self._clock() if record else 0.0
        if wait > 0:
            raise TooManyAttempts(
                f"too many failed attempts from this client; try again in {int(wait) + 1} s",
                retry_after=int(wait) + 1,
            )

    def failed(self, client: str, what: str) -> None:
        """Count a failure of ``client`` (``what``: which door, for the log)."""
        now = self._clock()
        with self._lock:
            record = self._clients.pop(client, None) or _Record()
            self._clients[client] = record  # most recent last: the oldest go first
            record.failures = [at for at in record.failures if now - at < self.window] + [now]
            count = len(record.failures)
            if count >= self.allowed:
                seconds = min(self.longest, self.lockout * 2**record.lockouts)
                record.locked_until, record.lockouts = now + seconds, record.lockouts + 1
                record.failures = []
            self._forget_oldest()
        log.warning("%s: failed attempt %d from %s", what, count, client)

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._clients.pop(client, None)

    def _forget_oldest(self) -> None:
        while len(self._clients) > MAX_CLIENTS:
            self._clients.pop(next(iter(self._clients)))
