"""Time, injectable: every timestamp is timezone-aware UTC; tests pass a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Anything with ``now()`` returning an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def utc_day(moment: datetime) -> str:
    """``YYYYMMDD`` of a moment in UTC (task numbers use the UTC date)."""
    return moment.astimezone(UTC).strftime("%Y%m%d")
