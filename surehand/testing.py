"""Helpers for testing surehand and your own agents against it: a manual clock and
ready-made embedded instances."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

DEFAULT_START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class ManualClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, moment: datetime) -> None:
        with self._lock:
            self._now = moment.astimezone(UTC)
