"""Request schemas validated at the edge (pydantic), shared by every front door.

Limits (DESIGN.md section 9): ids at most 255 characters of ``[A-Za-z0-9._:-]``, subject at most
512 characters, body at most 1 MiB of UTF-8, lists at most 256 items, role codes by regex.
A bad request raises :class:`surehand.errors.ValidationFailed` naming the first bad field;
nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from surehand.digest import normalize_text
from surehand.errors import ValidationFailed
from surehand.model import (
    Priority,
    ReportStatus,
    RiskLevel,
    TaskFields,
)

# The one rule for role codes lives in roles.py; re-exported for the doors that import it here.
from surehand.roles import check_role as check_role

MAX_ID = 255
MAX_SUBJECT = 512
MAX_BODY_BYTES = 1024 * 1024
MAX_ITEMS = 256
MAX_TIME_LIMIT_SECONDS = 7 * 24 * 3600  # a week: longer is no limit a person means
# Anchored with \A...\Z, not ^...$: ``$`` also matches before a trailing newline, which let
# "sub-1\n" through ``.match``.
ID_RE = re.compile(r"\A[A-Za-z0-9._:-]{1,255}\Z")
# Every id pattern fits its column (store/schema.py): task_id String(32) holds "TASK-", eight
# date digits, "-" and at most 18 digits; report_id String(32) and case_id String(64) likewise.
MAX_TASK_ID = 32
TASK_ID_RE = re.compile(r"\ATASK-[0-9]{8}-[0-9]{3,18}\Z")
PRIORITY_ALIASES = {
    "urgent": "P0",
    "critical": "P0",
    "high": "P1",
    "normal": "P2",
    "low": "P3",
}


def valid_text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("is not valid UTF-8 (lone surrogate)") from exc
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return normalize_text(value)


def check_submission_id(value: str) -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise ValueError("must be 1-255 characters of [A-Za-z0-9._:-]")
    return value


def _priority(value: object) -> object:
    if isinstance(value, str):
        text = value.strip()
        return PRIORITY_ALIASES.get(text.lower(), text.upper())
    return value


def at_most(value: str, limit: int) -> str:
    """``value`` (already normalised) if it has at most ``limit`` characters."""
    if len(value) > limit:
        raise ValueError(f"must be at most {limit} characters (after NFC normalisation)")
    return value


def _task_ref(value: str) -> str:
    if not isinstance(value, str) or not TASK_ID_RE.match(value):
        raise ValueError("must be a task id like TASK-20260101-001")
    return value


RoleCode = Annotated[str, BeforeValidator(check_role)]


MAX_BUDGET_USD = 1_000_000.0


class Edge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class TaskRequest(Edge):
    """A request to create a TASK (``write_task``)."""

    sender: RoleCode
    recipient: RoleCode
    # Lengths are checked after NFC normalisation (which can lengthen text), in the
    # validators below; the schema still tells clients the limit.
    subject: str = Field(min_length=1, json_schema_extra={"maxLength": MAX_SUBJECT})
    body: str = ""
    priority: Annotated[Priority, BeforeValidator(_priority)] = Priority.P2
    thread_key: str = Field(default="", json_schema_extra={"maxLength": MAX_ID})
    parent: str = ""
    references: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    risk_level: RiskLevel = RiskLevel.MEDIUM
    client_submission_id: str | None = None
    # Seconds one attempt may run before its session is stopped (cause timed_out); None: the
    # role's default (SUREHAND_ROLE_TIME_LIMITS), if any. In the digest only when given.
    time_limit_seconds: int | None = Field(None, ge=1, le=MAX_TIME_LIMIT_SECONDS, strict=True)
    budget_usd: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BUDGET_USD,
        allow_inf_nan=False,
        description="What the TASK's LLM agent may spend across its attempts (USD); "
        "omitted: its role's default (SUREHAND_AGENT_BUDGET_USD), if any.",
    )

    @field_validator("budget_usd")
    @classmethod
    def _budget(cls, value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    @field_validator("subject", "body", "thread_key", "parent")
    @classmethod
    def _text(cls, value: str) -> str:
        return valid_text(value)

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return at_most(value, MAX_SUBJECT)

    @field_validator("thread_key")
    @classmethod
    def _thread_key(cls, value: str) -> str:
        return at_most(value, MAX_ID)

    @field_validator("body")
    @classmethod
    def _body_size(cls, value: str) -> str:
        if len(value.encode("utf-8")) > MAX_BODY_BYTES:
            raise ValueError(f"is larger than {MAX_BODY_BYTES} bytes (1 MiB)")
        return value

    @field_validator("parent")
    @classmethod
    def _parent(cls, value: str) -> str:
        return _task_ref(value) if value else value

    @field_validator("references")
    @classmethod
    def _references(cls, value: list[str]) -> list[str]:
        items = [valid_text(item) for item in value]
        for item in items:
            if len(item) > MAX_ID or not item:
                raise ValueError("items must be 1-255 characters (after NFC normalisation)")
        return items

    @field_validator("depends_on")
    @classmethod
    def _depends_on(cls, value: list[str]) -> list[str]:
        return [_task_ref(item) for item in value]

    @field_validator("client_submission_id")
    @classmethod
    def _csid(cls, value: str | None) -> str | None:
        return None if value is None else check_submission_id(value)

    def to_fields(self) -> TaskFields:
        return TaskFields(
            sender=self.sender,
            recipient=self.recipient,
            subject=self.subject,
            body=self.body,
            priority=self.priority,
            thread_key=self.thread_key,
            parent=self.parent,
            references=tuple(self.references),
            depends_on=tuple(self.depends_on),
            risk_level=self.risk_level,
            time_limit_seconds=self.time_limit_seconds,
            budget_usd=self.budget_usd,
        )


class ReportRequest(Edge):
    """A REPORT on a TASK (``write_report``)."""

    task_id: str
    reporter: RoleCode
    body: str = Field(min_length=1)
    status: ReportStatus = ReportStatus.DONE
    recipient: RoleCode | None = None
    client_submission_id: str | None = None

    @field_validator("task_id")
    @classmethod
    def _task(cls, value: str) -> str:
        return _task_ref(value)

    @field_validator("body")
    @classmethod
    def _body(cls, value: str) -> str:
        value = valid_text(value)
        if len(value.encode("utf-8")) > MAX_BODY_BYTES:
            raise ValueError(f"is larger than {MAX_BODY_BYTES} bytes (1 MiB)")
        return value

    @field_validator("client_submission_id")
    @classmethod
    def _csid(cls, value: str | None) -> str | None:
        return None if value is None else check_submission_id(value)


def first_error(exc: ValidationError) -> ValidationFailed:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "request"
    message = str(error.get("msg", "is invalid")).removeprefix("Value error, ")
    return ValidationFailed(where, message)


def _fields(data: object) -> dict[str, Any]:
    """The request's fields as a dict; ValidationFailed unless it is a mapping of names."""
    if not isinstance(data, Mapping) or not all(isinstance(key, str) for key in data):
        raise ValidationFailed(
            "request", f"must be a mapping of field names to values, not {type(data).__name__}"
        )
    return dict(data)


def parse_task_request(data: Mapping[str, Any] | TaskRequest) -> TaskRequest:
    """Validate a TASK request; raise ValidationFailed naming the first bad field."""
    if isinstance(data, TaskRequest):
        return data
    try:
        return TaskRequest.model_validate(_fields(data))
    except ValidationError as exc:
        raise first_error(exc) from None


def parse_report_request(data: Mapping[str, Any] | ReportRequest) -> ReportRequest:
    """Validate a REPORT request; raise ValidationFailed naming the first bad field."""
    if isinstance(data, ReportRequest):
        return data
    try:
        return ReportRequest.model_validate(_fields(data))
    except ValidationError as exc:
        raise first_error(exc) from None


def validate_tenant(value: str) -> str:
    try:
        return check_submission_id(value)
    except ValueError as exc:
        raise ValidationFailed("tenant", str(exc)) from None
