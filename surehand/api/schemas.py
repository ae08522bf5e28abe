"""Request bodies of the HTTP API beyond ``TaskRequest`` (which ``POST /v1/tasks`` takes as is).

The TASK id comes from the path, so the REPORT body is ``ReportRequest`` without ``task_id``;
the service layer validates the combined request again with ``ReportRequest`` itself.
Acting-role fields (``reporter``, ``actor``) are optional: they default to the caller's role,
and only an ADMIN principal may name another role.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from surehand.model import Action, ReportStatus
from surehand.requests import MAX_BODY_BYTES, RoleCode


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
    client_submission_id: str | None = Field(
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

    effect: Literal["present", "absent"]
    note: str = Field(min_length=1, max_length=4096, description="How the effect was checked.")
    actor: RoleCode | None = Field(None, description="Reviewing role; defaults to the caller's.")
