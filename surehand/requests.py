"""Request schemas validated at the edge (pydantic), shared by every front door.

Limits (DESIGN.md section 9): ids at most 255 characters of ``[A-Za-z0-9._:-]``, subject at most
512 characters, body at most 1 MiB of UTF-8, lists at most 256 items, role codes by regex.
A bad request raises :class:`surehand.errors.ValidationFailed` naming the first bad field;
nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from surehand.digest import normalize_text
from surehand.errors import ValidationFailed
from surehand.model import (
    Action,
    Bucket,
    CaseState,
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


def _first_error(exc: ValidationError) -> ValidationFailed:
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
        raise _first_error(exc) from None


def parse_report_request(data: Mapping[str, Any] | ReportRequest) -> ReportRequest:
    """Validate a REPORT request; raise ValidationFailed naming the first bad field."""
    if isinstance(data, ReportRequest):
        return data
    try:
        return ReportRequest.model_validate(_fields(data))
    except ValidationError as exc:
        raise _first_error(exc) from None


def validate_tenant(value: str) -> str:
    try:
        return check_submission_id(value)
    except ValueError as exc:
        raise ValidationFailed("tenant", str(exc)) from None


# --- arguments of the other calls ---------------------------------------------------------
#
# Everything else a door hands to the service layer -- ids, filters, reasons, notes, review
# effects, lifecycle actions, limit and offset -- is validated here, once, for every door.
# The service functions parse their own arguments (so no door can skip it); the facade's reads
# parse theirs before they reach the store.

MAX_TEXT = 4096  # reason, note: characters after NFC normalisation
MAX_LIMIT = 1000
MAX_OFFSET = 2**31 - 1
MAX_REPORT_ID = 32
MAX_CASE_ID = 64
REPORT_ID_RE = re.compile(r"\AREPORT-[0-9]{8}-[0-9]{3,16}\Z")  # fits String(32)
CASE_ID_RE = re.compile(r"\ACASE-[0-9]{8}-[0-9]{3,18}-[0-9]{1,18}\Z")  # fits String(64)


def matching(regex: re.Pattern[str], what: str) -> BeforeValidator:
    """A validator: a string ``regex`` matches, else "must be ``what``"."""

    def check(value: object) -> object:
        if not isinstance(value, str) or not regex.match(value):
            raise ValueError(f"must be {what}")
        return value

    return BeforeValidator(check)


def _pattern(regex: re.Pattern[str], example: str) -> BeforeValidator:
    return matching(regex, f"an id like {example}")


def _text_arg(value: object) -> object:
    """A free-text argument: a string without NUL or lone surrogates, NFC-normalised."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {type(value).__name__}")
    return at_most(valid_text(value), MAX_TEXT)


def _count(value: object) -> object:
    """An integer argument (a bool is not one, though Python says it is)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer, not {type(value).__name__}")
    return value


def _id_schema(regex: re.Pattern[str], longest: int) -> Any:
    """What the OpenAPI document says of an id: its pattern (in JSON Schema's ^...$ form)."""
    pattern = "^" + regex.pattern.removeprefix("\\A").removesuffix("\\Z") + "$"
    return Field(json_schema_extra={"pattern": pattern, "maxLength": longest})


TaskId = Annotated[
    str, _pattern(TASK_ID_RE, "TASK-20260101-001"), _id_schema(TASK_ID_RE, MAX_TASK_ID)
]
ReportId = Annotated[
    str, _pattern(REPORT_ID_RE, "REPORT-20260101-001"), _id_schema(REPORT_ID_RE, MAX_REPORT_ID)
]
CaseId = Annotated[
    str, _pattern(CASE_ID_RE, "CASE-20260101-001-1"), _id_schema(CASE_ID_RE, MAX_CASE_ID)
]
Text = Annotated[str, BeforeValidator(_text_arg), Field(json_schema_extra={"maxLength": MAX_TEXT})]
Limit = Annotated[int, BeforeValidator(_count), Field(ge=1, le=MAX_LIMIT)]
Offset = Annotated[int, BeforeValidator(_count), Field(ge=0, le=MAX_OFFSET)]
Effect = Literal["present", "absent"]


class TransitionRequest(Edge):
    """A lifecycle move (``transition``): the TASK, the action and who acts."""

    task_id: TaskId
    action: Action
    actor: RoleCode
    reason: Text | None = None
    report_id: ReportId | None = None


def _reason(value: str) -> str:
    if not value.strip():
        raise ValueError("must say why (it is blank)")
    return value


class CancelTaskRequest(Edge):
    """A request to cancel a TASK (``cancel``): who asks, and why (required)."""

    task_id: TaskId
    actor: RoleCode
    reason: Annotated[Text, AfterValidator(_reason)]


class PauseRequest(Edge):
    """A request to pause or resume a role (``pause_role``/``resume_role``)."""

    role: RoleCode
    actor: RoleCode
    reason: Text = ""


class BudgetRequest(Edge):
    """An approver raises what a TASK's LLM agent may spend across its attempts."""

    task_id: TaskId
    budget_usd: float = Field(gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    note: Text
    actor: RoleCode

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say why the budget is raised (it is blank)")
        return value


class RecoverRequest(Edge):
    """A request for a successor of an interrupted TASK (``recover``)."""

    task_id: TaskId
    actor: RoleCode


class ReviewRequest(Edge):
    """An approver's statement about a held case (``review``): whether each unsettled
    operation's effect happened, exactly present or absent -- one ``effect`` for all, or one
    per operation id in ``operations`` (``effect`` then answers the ones not listed)."""

    case_id: CaseId
    operations: dict[Annotated[int, BeforeValidator(_count)], Effect] = Field(
        default_factory=dict, max_length=MAX_ITEMS
    )
    effect: Effect | None = Field(None, validate_default=True)
    note: Text
    actor: RoleCode

    @field_validator("effect")
    @classmethod
    def _answered(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and not info.data.get("operations"):
            raise ValueError("say present or absent (or answer each operation)")
        return value

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say how the effect was checked (it is blank)")
        return value


class TaskQuery(Edge):
    """The filters and page of ``list_tasks``."""

    bucket: Bucket | None = None
    recipient: RoleCode | None = None
    limit: Limit = 100
    offset: Offset = 0


MAX_SEARCH = 200


def _search_text(value: object) -> object:
    text = _text_arg(value)
    if isinstance(text, str) and len(text) > MAX_SEARCH:
        raise ValueError(f"must be at most {MAX_SEARCH} characters")
    return text


def _role_any_case(value: object) -> object:
    """A role code given in any case (``qa`` is QA): role codes are upper-case."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {type(value).__name__}")
    return check_role(value.upper())


class TaskSearch(Edge):
    """The filters and page of the console's lists (``Surehand.find_tasks``): text is searched
    case-insensitively in the TASK id, submission id, subject and body; ``after``/``before``
    are page cursors from an earlier page."""

    bucket: Bucket | None = None
    recipient: Annotated[str, BeforeValidator(_role_any_case)] | None = None
    priority: Priority | None = None
    text: Annotated[str, BeforeValidator(_search_text)] = ""
    after: str | None = Field(None, max_length=64)
    before: str | None = Field(None, max_length=64)
    limit: Annotated[int, BeforeValidator(_count), Field(ge=1, le=500)] = 50


class CaseQuery(Edge):
    """The filters and page of ``cases``."""

    state: CaseState | None = None
    task_id: TaskId | None = None
    limit: Limit = 100


class _One(Edge):
    """One id argument of a read (``get_task``, ``history``, ``case``, ...)."""

    task_id: TaskId | None = None
    case_id: CaseId | None = None
    client_submission_id: Annotated[str, BeforeValidator(check_submission_id)] | None = None


_M = TypeVar("_M", bound=BaseModel)


DELEGATION_KEY_RE = re.compile(r"\A[A-Za-z0-9._-]{1,128}\Z")


class DelegateRequest(Edge):
    """A session's request for a child TASK (``delegate``). The child's sender, tenant,
    parent and thread come from the session's TASK; its fields are then checked as any
    ``write_task`` request's (:class:`TaskRequest`), naming the same fields."""

    recipient: str
    subject: str
    body: str = ""
    priority: str = Priority.P2.value
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    references: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    risk_level: str = RiskLevel.MEDIUM.value
    key: str | None = None

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and not DELEGATION_KEY_RE.match(value):
            raise ValueError("must be 1-128 characters of [A-Za-z0-9._-]")
        return value


def parse(model: type[_M], **arguments: Any) -> _M:
    """Validate a call's arguments with ``model``; ValidationFailed names the first bad one."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise _first_error(exc) from None


def task_id_arg(value: object) -> str:
    """A TASK id argument, or ValidationFailed naming ``task_id``."""
    return str(parse(_One, task_id=value).task_id)


def case_id_arg(value: object) -> str:
    """A case id argument, or ValidationFailed naming ``case_id``."""
    return str(parse(_One, case_id=value).case_id)


def submission_id_arg(value: object) -> str:
    """A client_submission_id argument, or ValidationFailed naming it."""
    return str(parse(_One, client_submission_id=value).client_submission_id)
