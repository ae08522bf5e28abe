"""What a TASK may spend on its LLM agent, across its attempts (issue 32, item 3).

A TASK's ``budget_usd`` (or its role's default, ``SUREHAND_AGENT_BUDGET_USD``) is what all its
attempts together may spend, as the agent CLI itself reports cost (``Attempt.details``'s
``usage.cost_usd``). Each attempt of the claude preset gets ``--max-budget-usd`` with what is
left; an attempt that Claude Code stops on it, or that would start with nothing left, ends
interrupted with cause ``budget_spent`` and goes through admission, which holds the TASK with
"budget spent: $X of $Y" until an approver raises the budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from surehand.config import Settings
from surehand.errors import ConfigError, SessionInterrupted
from surehand.model import Attempt, AttemptCause
from surehand.roles import per_role
from surehand.store import Store, attempts

SETTING = "SUREHAND_AGENT_BUDGET_USD"


@dataclass(frozen=True)
class Budget:
    """A TASK's budget and what its earlier attempts spent of it (USD)."""

    limit: float
    spent: float

    @property
    def left(self) -> float:
        return self.limit - self.spent

    def spent_by(self, usage: Mapping[str, Any] | None) -> SessionInterrupted:
        """The interruption of an attempt that spent what was left (``usage``: its own)."""
        cost = float((usage or {}).get("cost_usd") or 0)
        return SessionInterrupted(
            spent_reason(self.spent + cost, self.limit), cause=AttemptCause.BUDGET_SPENT.value
        )


def spent_reason(spent: float, limit: float) -> str:
    """The reason a TASK is held for its budget, as every door shows it."""
    return f"budget spent: ${spent:.2f} of ${limit:.2f}"


def cost_of(found: Iterable[Attempt]) -> float:
    """What attempts spent, as their agent CLIs reported it."""
    total = 0.0
    for attempt in found:
        usage = (attempt.details or {}).get("usage") or {}
        cost = usage.get("cost_usd") if isinstance(usage, dict) else None
        total += float(cost) if isinstance(cost, int | float) else 0.0
    return total


def spent_before(store: Store, task_id: str) -> float:
    with store.snapshot() as connection:
        return cost_of(attempts.for_task(connection, task_id))


def role_budget(settings: Settings, role: str) -> float | None:
    """The role's default budget (None: none)."""
    default, by_role = per_role(settings.agent_budget_usd, SETTING)
    found = by_role.get(role, default)
    if found is None or found == "":
        return None
    try:
        amount = float(found)
    except ValueError:
        amount = -1.0
    if not amount > 0:
        raise ConfigError(f"{SETTING}: {found!r} is not an amount above 0", setting=SETTING)
    return amount
