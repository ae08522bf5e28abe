"""How the store's columns hold values and its constraints are named: timestamps timezone-aware
UTC on every backend, enum columns checked against their ``surehand.model`` enum, and the
naming convention of indexes and constraints (the tables: :mod:`.schema`)."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, DateTime, Dialect, TypeDecorator

# Constraint and index names (the migrations create them under these names).
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in, timezone-aware UTC out, on every backend (SQLite has no tz)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def enum_check(column: str, values: type[enum.Enum], name: str) -> CheckConstraint:
    """A CHECK that ``column`` holds one of ``values``' values (a model enum's)."""
    allowed = ", ".join(f"'{member.value}'" for member in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=name)


def timestamp(name: str, nullable: bool = False) -> Column[Any]:
    """A UTC timestamp column."""
    return Column(name, UTCDateTime(), nullable=nullable)
