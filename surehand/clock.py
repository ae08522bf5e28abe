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
    utc = moment.astimezone(UTC)
    # By hand: glibc's strftime does not pad %Y below year 1000, and this is twice as fast.
    return f"{utc.year:04d}{utc.month:02d}{utc.day:02d}"
