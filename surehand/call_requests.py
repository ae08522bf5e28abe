"""The arguments of every call besides writing a TASK or REPORT, validated at the edge.

Everything else a door hands to the service layer -- ids, filters, reasons, notes, review
effects, lifecycle actions, limit and offset -- is validated here, once, for every door.
The service functions parse their own arguments (so no door can skip it); the facade's reads
parse theirs before they reach the store. The TASK and REPORT requests, and the field rules
shared with them, are in :mod:`surehand.requests`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from surehand.model import Action, Bucket, CaseState, Priority, RiskLevel
from surehand.requests import (
    MAX_BUDGET_USD,
    MAX_ITEMS,
    MAX_TASK_ID,
    TASK_ID_RE,
    Edge,
    RoleCode,
    at_most,
    check_submission_id,
    first_error,
    valid_text,
)
from surehand.roles import check_role

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
        raise first_error(exc) from None


def task_id_arg(value: object) -> str:
    """A TASK id argument, or ValidationFailed naming ``task_id``."""
    return str(parse(_One, task_id=value).task_id)


def case_id_arg(value: object) -> str:
    """A case id argument, or ValidationFailed naming ``case_id``."""
    return str(parse(_One, case_id=value).case_id)


def submission_id_arg(value: object) -> str:
    """A client_submission_id argument, or ValidationFailed naming it."""
    return str(parse(_One, client_submission_id=value).client_submission_id)
