"""Request and problem schemas of the HTTP API beyond ``TaskRequest``.

The TASK id comes from the path, so the REPORT body is ``ReportRequest`` without ``task_id``;
the service layer validates the combined request again with ``ReportRequest`` itself.
Acting-role fields (``reporter``, ``actor``) are optional: they default to the caller's role,
and only an ADMIN principal may name another role.

The OpenAPI document states the patterns the service layer enforces (role codes, ids), so a
client or a fuzzer learns them from the schema; the service layer stays the one that checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from surehand import requests
from surehand.model import Action, ReportStatus
from surehand.requests import MAX_BODY_BYTES, check_role
from surehand.roles import MAX_ROLE
from surehand.roles import ROLE_PATTERN as ROLE_PATTERN  # re-exported for routes.py

ID_PATTERN = r"^[A-Za-z0-9._:-]{1,255}$"
TASK_ID_PATTERN = r"^TASK-[0-9]{8}-[0-9]{3,}$"
ROLE_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": ROLE_PATTERN,
    "maxLength": MAX_ROLE,
    "description": "A role code such as PM, DEV or LEAD-QA (SYSTEM is reserved).",
}
ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": ID_PATTERN, "maxLength": 255}
TASK_ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": TASK_ID_PATTERN, "maxLength": 32}

RoleCode = Annotated[str, BeforeValidator(check_role), WithJsonSchema(ROLE_SCHEMA)]


class Problem(BaseModel):
    """An error (RFC 9457 ``application/problem+json``); extra members carry details."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="urn:surehand:problem:<code>")
    title: str
    status: int
    detail: str = Field(description="What went wrong and what to do next.")
    code: str = Field(description="Machine-readable, stable, snake_case.")
    retryable: bool = Field(description="Whether the same call may succeed later unchanged.")
    field: str | None = Field(None, description="The request field at fault, for bad input.")


def _with_patterns(schema: dict[str, Any]) -> None:
    """Add the role and id patterns to a ``TaskRequest`` schema (where it lacks them)."""
    properties = schema.get("properties", {})
    for name in ("sender", "recipient"):
        _merge(properties.get(name), ROLE_SCHEMA)
    _merge(properties.get("client_submission_id"), ID_SCHEMA)
    _merge(properties.get("parent"), {"pattern": f"^$|{TASK_ID_PATTERN}"})
    _merge(properties.get("depends_on", {}).get("items"), TASK_ID_SCHEMA)


def _merge(target: dict[str, Any] | None, extra: dict[str, Any]) -> None:
    if target is None:
        return
    for variant in target.get("anyOf", [target]):
        if variant.get("type") in (None, "string"):
            for key, value in extra.items():
                variant.setdefault(key, value)


class TaskRequest(requests.TaskRequest):
    """A request to create a TASK (``write_task``): the service's model, its patterns stated."""

    model_config = ConfigDict(json_schema_extra=_with_patterns)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReportBody(_Body):
    """A REPORT on the TASK named in the path."""

    body: str = Field(min_length=1, description=f"Report text, at most {MAX_BODY_BYTES} bytes.")
    status: ReportStatus = ReportStatus.DONE
    reporter: RoleCode | None = Field(
        None, description="Reporting role; defaults to the caller's role (the TASK's recipient)."
    )
    recipient: RoleCode | None = Field(None, description="Defaults to the TASK's sender.")
    client_submission_id: Annotated[str, WithJsonSchema(ID_SCHEMA)] | None = Field(
        None, description="Dedupe key for this REPORT (or send an Idempotency-Key header)."
    )


class TransitionBody(_Body):
    """A lifecycle move: ``claim``, ``submit``, ``finish``, ``approve``, ``reject``, ...."""

    action: Action
    reason: str | None = Field(None, max_length=4096, description="Required by reject/archive.")
    report_id: str | None = Field(None, max_length=255)
    actor: RoleCode | None = Field(None, description="Acting role; defaults to the caller's.")


class RecoverBody(_Body):
    """Ask for a successor of an interrupted TASK; admission decides from recorded evidence."""

    actor: RoleCode | None = Field(None, description="Requesting role; defaults to the caller's.")


class ReviewBody(_Body):
    """An approver's statement about a held case's interrupted effect."""

    effect: Literal["present", "absent"] | None = Field(
        None,
        description="The answer for every unsettled operation of the interrupted attempt "
        "(those not answered in `operations`).",
    )
    operations: dict[int, Literal["present", "absent"]] | None = Field(
        None,
        max_length=256,
        description="One answer per unsettled operation, by operation id (from the case).",
    )
    note: str = Field(min_length=1, max_length=4096, description="How the effect was checked.")
    actor: RoleCode | None = Field(None, description="Reviewing role; defaults to the caller's.")


class CancelBody(_Body):
    """Cancel the TASK named in the path: its sender, its approvers or an ADMIN."""

    reason: str = Field(min_length=1, max_length=4096, description="Why (required, recorded).")
    actor: RoleCode | None = Field(None, description="Acting role; defaults to the caller's.")


class ReleaseBody(_Body):
    """Run the TASK named in the path anyway, held by an archived or cancelled dependency."""

    actor: RoleCode | None = Field(None, description="Acting role; defaults to the caller's.")


class PauseBody(_Body):
    """Pause a role of the caller's tenant (ADMIN or PM): no session of it starts."""

    reason: str = Field("", max_length=4096, description="Why (recorded with the pause).")
    actor: RoleCode | None = Field(None, description="Acting role; defaults to the caller's.")


class BudgetBody(_Body):
    """An approver raises what the TASK's LLM agent may spend across its attempts."""

    budget_usd: float = Field(
        gt=0, le=requests.MAX_BUDGET_USD, description="The new budget in USD (above the current)."
    )
    note: str = Field(min_length=1, max_length=4096, description="Why it is raised (recorded).")
    actor: RoleCode | None = Field(None, description="Approving role; defaults to the caller's.")
