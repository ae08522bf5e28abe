"""Throttling of failed credential checks, shared by the network doors (API tokens, MCP over
HTTP, console sign-in, the metrics token of the API and of a worker's metrics port).

Failures are counted two ways, each within a sliding ``window``:

* per **client**: its address as the server sees it (the TCP peer, or the address forwarded by a
  proxy listed in ``SUREHAND_API_FORWARDED_ALLOW_IPS``; none by default);
* per **credential**: the SHA-256 of what was presented (never the credential itself), so the
  same wrong token replayed from address after address is caught too.

``allowed`` failures of a client or of a credential lock it out for ``lockout`` seconds, doubling
with each further lockout up to ``longest``; a locked-out client's or credential's failures are
answered 429 with ``Retry-After``. A *valid* credential is never refused here: the doors check it
first and let it through whatever its client did, because every process on one host shares
127.0.0.1 (and everyone behind a proxy shares its address) -- one misconfigured agent must not
lock out its neighbours. A success never clears a count, so a guesser holding one valid token
cannot use it to reset its failures. What makes a token unguessable is its length: the serving
commands refuse tokens shorter than 16 characters.

Every failure is logged with the client's address, its count and a short fingerprint of the
credential (the first 8 hex digits of its SHA-256, to tell one stale token from many guesses).
Kept in the process's memory: a restart forgets it, several API processes each count on their
own (the bound per process still holds), and at most :data:`MAX_KEYS` of each are kept.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from surehand.errors import TooManyAttempts

log = logging.getLogger(__name__)
MAX_KEYS = 100_000  # clients and credentials each; the least recently failed go first beyond it


def fingerprint(credential: str) -> bytes:
    """The key a presented credential is counted under (its SHA-256)."""
    return hashlib.sha256(credential.encode("utf-8", "surrogatepass")).digest()


@dataclass
class _Record:
    """Failures of one client or one credential."""

    failures: list[float] = field(default_factory=list)
    locked_until: float = 0.0
    lockouts: int = 0


class _Counter:
    """Failures per key with lockouts (not thread-safe: :class:`FailureThrottle` locks)."""

    def __init__(self, throttle: FailureThrottle) -> None:
        self._throttle = throttle
        self._records: dict[object, _Record] = {}

    def wait(self, key: object, now: float) -> float:
        """Seconds ``key`` stays locked out (0: it is not)."""
        record = self._records.get(key)
        return max(0.0, record.locked_until - now) if record else 0.0

    def fail(self, key: object, now: float) -> int:
        """Count a failure of ``key``; lock it out once it reaches the limit. Its count."""
        settings = self._throttle
        record = self._records.pop(key, None)
        if record is None or (record.failures and now - record.failures[-1] > settings.longest):
            record = _Record()  # quiet for long: its lockouts no longer double
        self._records[key] = record  # the most recently failed last: the oldest go first
        recent = [at for at in record.failures if now - at < settings.window]
        record.failures = [*recent[-settings.allowed :], now]
        count = len(record.failures)
        if count >= settings.allowed and record.locked_until <= now:
            seconds = min(settings.longest, settings.lockout * 2**record.lockouts)
            record.locked_until, record.lockouts = now + seconds, record.lockouts + 1
            record.failures = []
        while len(self._records) > MAX_KEYS:
            self._records.pop(next(iter(self._records)))
        return count


class FailureThrottle:
    """Counts failed credential checks per client and per credential (thread-safe)."""

    def __init__(
        self,
        *,
        allowed: int = 10,
        window: float = 60.0,
        lockout: float = 30.0,
        longest: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.allowed, self.window, self.lockout, self.longest = allowed, window, lockout, longest
        self._clock = clock
        self._clients = _Counter(self)
        self._credentials = _Counter(self)
        self._lock = threading.Lock()

    def failed(self, client: str, credential: bytes, what: str) -> TooManyAttempts | None:
        """Count a failed check of ``credential`` (:func:`fingerprint`) from ``client``.

        The refusal to answer with (429) when the client or the credential was locked out
        already, else None (answer 401). ``what``: which door, for the log."""
        now = self._clock()
        with self._lock:
            wait = max(self._clients.wait(client, now), self._credentials.wait(credential, now))
            count = self._clients.fail(client, now)
            self._credentials.fail(credential, now)
        log.warning(
            "%s: failed attempt %d from %s (credential %s...)",
            what,
            count,
            client,
            credential.hex()[:8],
        )
        if wait <= 0:
            return None
        seconds = int(wait) + 1
        return TooManyAttempts(
            f"too many failed attempts from this client or with this credential; try again in "
            f"{seconds} s (a valid token is accepted meanwhile)",
            retry_after=seconds,
        )
