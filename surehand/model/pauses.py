"""A paused role (``surehand.dispatcher.pauses``): no session of it starts meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Pause:
    """A paused role: who paused it (role and principal), when, and why."""

    tenant: str
    role: str
    paused_by: str
    principal: str | None
    reason: str
    paused_at: datetime

    def to_dict(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "role": self.role,
            "paused_by": self.paused_by,
            "principal": self.principal,
            "reason": self.reason,
            "paused_at": self.paused_at.isoformat(),
        }
