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

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from surehand.digest import normalize_text
from surehand.errors import ValidationFailed
from surehand.model import Priority, ReportStatus, RiskLevel, TaskFields

# The one rule for role codes lives in roles.py; re-exported for the doors that import it here.
from surehand.roles import check_role as check_role

MAX_ID = 255
MAX_SUBJECT = 512
MAX_BODY_BYTES = 1024 * 1024
MAX_ITEMS = 256
# Anchored with \A...\Z, not ^...$: ``$`` also matches before a trailing newline, which let
# "sub-1\n" through ``.match``.
ID_RE = re.compile(r"\A[A-Za-z0-9._:-]{1,255}\Z")
TASK_ID_RE = re.compile(r"\ATASK-[0-9]{8}-[0-9]{3,}\Z")
PRIORITY_ALIASES = {
    "urgent": "P0",
    "critical": "P0",
    "high": "P1",
    "normal": "P2",
    "low": "P3",
}


def _valid_utf8(value: str) -> str:
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


def _task_ref(value: str) -> str:
    if not TASK_ID_RE.match(value):
        raise ValueError("must be a task id like TASK-20260101-001")
    return value


RoleCode = Annotated[str, BeforeValidator(check_role)]


class _Edge(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)


class TaskRequest(_Edge):
    """A request to create a TASK (``write_task``)."""

    sender: RoleCode
    recipient: RoleCode
    subject: str = Field(min_length=1, max_length=MAX_SUBJECT)
    body: str = ""
    priority: Annotated[Priority, BeforeValidator(_priority)] = Priority.P2
    thread_key: str = Field(default="", max_length=MAX_ID)
    parent: str = ""
    references: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    risk_level: RiskLevel = RiskLevel.MEDIUM
    client_submission_id: str | None = None

    @field_validator("subject", "body", "thread_key", "parent")
    @classmethod
    def _text(cls, value: str) -> str:
        return _valid_utf8(value)

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

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
        for item in value:
            if len(item) > MAX_ID or not item:
                raise ValueError("items must be 1-255 characters")
        return [_valid_utf8(item) for item in value]

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
        )


class ReportRequest(_Edge):
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
        value = _valid_utf8(value)
        if len(value.encode("utf-8")) > MAX_BODY_BYTES:
            raise ValueError(f"is larger than {MAX_BODY_BYTES} bytes (1 MiB)")
        return value

    @field_validator("client_submission_id")
    @classmethod
    def _csid(cls, value: str | None) -> str | None:
        return None if value is None else check_submission_id(value)


def _first_error(exc: ValidationError) -> ValidationFailed:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "request"
    message = str(error.get("msg", "is invalid")).removeprefix("Value error, ")
    return ValidationFailed(where, message)


def parse_task_request(data: Mapping[str, Any] | TaskRequest) -> TaskRequest:
    """Validate a TASK request; raise ValidationFailed naming the first bad field."""
    if isinstance(data, TaskRequest):
        return data
    try:
        return TaskRequest.model_validate(dict(data))
    except ValidationError as exc:
        raise _first_error(exc) from None


def parse_report_request(data: Mapping[str, Any] | ReportRequest) -> ReportRequest:
    """Validate a REPORT request; raise ValidationFailed naming the first bad field."""
    if isinstance(data, ReportRequest):
        return data
    try:
        return ReportRequest.model_validate(dict(data))
    except ValidationError as exc:
        raise _first_error(exc) from None


def validate_tenant(value: str) -> str:
    try:
        return check_submission_id(value)
    except ValueError as exc:
        raise ValidationFailed("tenant", str(exc)) from None
