"""The UTC day that TASK and REPORT numbers are counted per."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from surehand.clock import utc_day


def test_the_day_of_a_moment_is_its_utc_date() -> None:
    two_hours_east = timezone(timedelta(hours=2))
    assert utc_day(datetime(2026, 12, 1, 0, 30, tzinfo=two_hours_east)) == "20261130"
    assert utc_day(datetime(2026, 11, 30, 23, 59, 59, 999_999, tzinfo=UTC)) == "20261130"
    assert utc_day(datetime(2026, 12, 1, tzinfo=UTC)) == "20261201"


def test_the_day_always_has_eight_digits() -> None:
    assert utc_day(datetime(987, 6, 5, tzinfo=UTC)) == "09870605"
