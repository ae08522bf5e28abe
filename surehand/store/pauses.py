"""Paused roles: one row per paused (tenant, role); no session of that role starts meanwhile."""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select

from surehand.model.pauses import Pause
from surehand.store.schema import role_pauses


def _from_row(row: object) -> Pause:
    return Pause(
        tenant=row.tenant,  # type: ignore[attr-defined]
        role=row.role,  # type: ignore[attr-defined]
        paused_by=row.paused_by,  # type: ignore[attr-defined]
        principal=row.principal,  # type: ignore[attr-defined]
        reason=row.reason,  # type: ignore[attr-defined]
        paused_at=row.paused_at,  # type: ignore[attr-defined]
    )


def get(connection: Connection, tenant: str, role: str) -> Pause | None:
    row = connection.execute(
        select(role_pauses).where(role_pauses.c.tenant == tenant, role_pauses.c.role == role)
    ).one_or_none()
    return _from_row(row) if row is not None else None


def listing(connection: Connection, tenant: str | None) -> list[Pause]:
    """The paused roles (of ``tenant``; all tenants with None), by role."""
    query = select(role_pauses).order_by(role_pauses.c.tenant, role_pauses.c.role)
    if tenant is not None:
        query = query.where(role_pauses.c.tenant == tenant)
    return [_from_row(row) for row in connection.execute(query).all()]


def add(connection: Connection, pause: Pause) -> bool:
    """Pause a role; False (nothing written) when it is paused already. (A concurrent pause
    of the same role makes the transaction raise DuplicateKey as it commits.)"""
    if get(connection, pause.tenant, pause.role) is not None:
        return False
    connection.execute(
        insert(role_pauses).values(
            tenant=pause.tenant,
            role=pause.role,
            paused_by=pause.paused_by,
            principal=pause.principal,
            reason=pause.reason,
            paused_at=pause.paused_at,
        )
    )
    return True


def remove(connection: Connection, tenant: str, role: str) -> bool:
    """Resume a role; False when it was not paused."""
    result = connection.execute(
        delete(role_pauses).where(role_pauses.c.tenant == tenant, role_pauses.c.role == role)
    )
    return result.rowcount == 1
