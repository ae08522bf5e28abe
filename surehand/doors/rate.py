"""A rate limit per key (a token bucket each): at most ``per_minute`` on average and as many
at once, then :class:`~surehand.errors.TooManyRequests` saying how long to wait.

Used where one caller's requests cost the server much more than they cost the caller (the
console's text searches read bodies). Kept in the process's memory, at most
:data:`MAX_KEYS` keys (the least recently used forgotten first).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable

from surehand.errors import TooManyRequests

MAX_KEYS = 10_000


class RateLimit:
    """Token buckets by key (thread-safe)."""

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # tokens per second
        self._clock = clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # key -> (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: Hashable, what: str) -> None:
        """Spend one of ``key``'s tokens, or raise TooManyRequests naming ``what``."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - at) * self.rate)
            allowed = tokens >= 1.0
            self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)  # recent last
            while len(self._buckets) > MAX_KEYS:
                self._buckets.pop(next(iter(self._buckets)))
        if not allowed:
            wait = math.ceil((1.0 - tokens) / self.rate)
            raise TooManyRequests(
                f"too many {what} ({int(self.capacity)} a minute); try again in {wait} s",
                retry_after=wait,
            )
