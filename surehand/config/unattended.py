"""Settings of running unattended (issue 32): automatic retries on evidence -- how many, for
which roles, after what backoff -- and what a TASK's LLM agent may spend.

Each is a comma list of ``[ROLE=]VALUE``, read per role by :mod:`surehand.roles`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class UnattendedSettings(BaseModel):
    """Retry policy and budgets, per role."""

    # -- running unattended (issue 32): retry on evidence, cost and budgets --
    retry_max_attempts: str = Field(
        "",
        description="Comma list of [ROLE=]N: how many attempts in a row a TASK of the role may "
        "make when its agent fails (or times out) with nothing open -- no effect declared, or "
        "every one settled -- before it is held with 'gave up after N attempts'. It applies "
        "only where effects are observed: Python agents, the claude preset with hooks, and "
        "the roles SUREHAND_RETRY_DECLARED_ROLES names; other agents make 1 (held at their "
        "first failure, whatever this says). Default 3.",
    )
    retry_declared_roles: str = Field(
        "",
        description="Comma list of roles whose command agents declare every side effect "
        "(surehand effect, the session tools) although surehand cannot observe it (a plain "
        "program, Codex): the operator says so, and their failures are retried like "
        "observed ones.",
    )
    retry_backoff_seconds: str = Field(
        "10",
        description="Comma list of [ROLE=]SECONDS: the wait before the first automatic retry; "
        "it doubles with each further one (up to SUREHAND_RETRY_BACKOFF_MAX_SECONDS) and is "
        "jittered (between half and all of it).",
    )
    retry_backoff_max_seconds: str = Field(
        "600", description="Comma list of [ROLE=]SECONDS: the longest wait before a retry."
    )
    retry_overload_backoff_seconds: str = Field(
        "60",
        description="Comma list of [ROLE=]SECONDS: the first wait instead of "
        "SUREHAND_RETRY_BACKOFF_SECONDS when the agent's output says its model API was "
        "overloaded (529) or rate-limited (429).",
    )
    agent_budget_usd: str = Field(
        "",
        description="Comma list of [ROLE=]USD: what a TASK of the role may spend on its LLM "
        "agent across its attempts unless the TASK names its own budget_usd (claude preset: "
        "--max-budget-usd with what is left). Empty: no budget.",
    )
