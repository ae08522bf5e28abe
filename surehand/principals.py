"""Who acts: a principal (name, role, tenant), and the rule for acting as another role.

The network doors turn bearer tokens into principals (:mod:`surehand.doors.auth`). A
principal's tenant scopes every read and every submission id; its role is the acting role of
transitions, reports, recoveries and reviews, and the only ``sender`` its TASKs may name. Only an
ADMIN principal may act as another role (the operator's and the local default's way to, say,
approve as PM), and every such act records the principal in its event's data
(:meth:`Principal.acting_for`). The service layer applies the rule, so every door gets it.

The Python door and the CLI are trusted as their configured principal: whoever holds the
database URL is the operator, so ``Surehand()`` acts as the local ADMIN of its tenant unless it
is given another ``principal``. The network doors bind each request's principal to the facade
(:meth:`surehand.facade.Surehand.acting_as`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from surehand.errors import Forbidden
from surehand.model import ADMIN

LOCAL_NAME = "local"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: a name for logs, the acting role, and the tenant."""

    name: str
    role: str
    tenant: str

    def acting_role(self, requested: str | None) -> str:
        """The role a call acts as: the principal's own, or (ADMIN only) the one requested."""
        if requested is None or requested == self.role:
            return self.role
        if self.role != ADMIN:
            raise Forbidden(
                f"principal {self.name!r} acts as {self.role}; it may not act as {requested}",
                role=self.role,
            )
        return requested

    def acting_for(self, role: str, field: str) -> dict[str, Any]:
        """Check that this principal may name ``role`` in ``field`` (sender, actor, reporter),
        and return what the event of the act records: who acted (``principal``, the token's
        name, and ``principal_role``) and, when it is another role, for whom (``on_behalf_of``).

        Another role: ADMIN only (Forbidden otherwise).
        """
        who = {"principal": self.name, "principal_role": self.role}
        if role == self.role:
            return who
        if self.role != ADMIN:
            raise Forbidden(
                f"{field} is {role}, but principal {self.name!r} acts as {self.role}; only "
                f"ADMIN may act for another role. Send {field} {self.role}",
                field=field,
                role=self.role,
            )
        return {"on_behalf_of": role, **who}


def acting_for(principal: Principal | None, role: str, field: str) -> dict[str, Any]:
    """:meth:`Principal.acting_for`; no principal (an in-process service call) is trusted."""
    return principal.acting_for(role, field) if principal is not None else {}


def local_principal(tenant: str) -> Principal:
    """The principal of an open door, the Python API and the CLI: the local ADMIN."""
    return Principal(LOCAL_NAME, ADMIN, tenant)
