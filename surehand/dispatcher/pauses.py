"""Pause and resume a role (per tenant), the one service every door calls.

While a role is paused no session of it starts: the claim refuses its TASKs (fresh ones stay
in ``inbox``, unpublished; admitted successors and rework wait in ``active``), and the sweep
leaves them alone. Sessions already running continue to their end. ``resume`` deletes the
pause, marks the role's ``inbox`` TASKs unpublished and runs the dispatcher sweep at once, so
what waited is published again (successors are published by the next reconciler pass).

Allowed to ADMIN and PM of the tenant (the roles that dispatch work to worker roles); the
pause records the acting role and the principal.
"""

from __future__ import annotations

from surehand.call_requests import PauseRequest, parse
from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import sweep
from surehand.errors import DuplicateKey, NotAuthorized
from surehand.model import ADMIN, PM
from surehand.model.pauses import Pause
from surehand.principals import Principal, acting_for
from surehand.requests import validate_tenant
from surehand.store import pauses, task_publishing

PAUSERS = frozenset({ADMIN, PM})


def pause_role(
    services: Services,
    role: str,
    *,
    actor: str,
    reason: str,
    tenant: str,
    principal: Principal | None = None,
) -> Pause:
    """Pause ``role`` in ``tenant``; pausing a paused role answers the first pause."""
    request, acting = _checked(role, actor, reason, principal)
    scope = validate_tenant(tenant)
    name = acting.get("principal")
    pause = Pause(
        tenant=scope,
        role=request.role,
        paused_by=request.actor,
        principal=None if name is None else str(name),
        reason=request.reason.strip(),
        paused_at=services.clock.now(),
    )
    try:
        with services.store.transaction() as connection:
            pauses.add(connection, pause)
    except DuplicateKey:
        pass  # a concurrent pause of the same role won; it is returned below
    with services.store.snapshot() as connection:
        found = pauses.get(connection, scope, request.role)
    assert found is not None
    return found


def resume_role(
    services: Services,
    role: str,
    *,
    actor: str,
    tenant: str,
    principal: Principal | None = None,
) -> int:
    """Resume ``role`` in ``tenant`` and publish what waited; returns how many TASKs of the
    role wait in ``inbox`` (all published again when this process has a publisher, else by
    the next sweep of one that has)."""
    request, _ = _checked(role, actor, "", principal)
    scope = validate_tenant(tenant)
    with services.store.transaction() as connection:
        pauses.remove(connection, scope, request.role)
        waiting = task_publishing.unpublish_role(connection, scope, request.role)
    sweep(services)
    return waiting


def paused_roles(services: Services, tenant: str | None) -> list[Pause]:
    """The paused roles of ``tenant`` (every tenant's with None)."""
    scope = validate_tenant(tenant) if tenant is not None else None
    with services.store.snapshot() as connection:
        return pauses.listing(connection, scope)


def _checked(
    role: str, actor: str, reason: str, principal: Principal | None
) -> tuple[PauseRequest, dict[str, object]]:
    request = parse(PauseRequest, role=role, actor=actor, reason=reason)
    acting = acting_for(principal, request.actor, "actor")
    if request.actor not in PAUSERS:
        raise NotAuthorized(
            f"{request.actor} may not pause or resume a role; only ADMIN or PM may",
            actor=request.actor,
            allowed=sorted(PAUSERS),
        )
    return request, acting
