"""Errors as ``application/problem+json`` (RFC 9457): one mapping from surehand's typed errors
to HTTP status codes, used by every handler so a client sees one shape for every failure.

Each problem carries the error's machine-readable ``code``, ``retryable`` and, for bad input,
the ``field`` at fault; retryable problems also get a ``Retry-After`` header. No stack trace and
no driver message ever reaches a client.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from surehand.errors import (
    AuthError,
    ConfigError,
    Conflict,
    Forbidden,
    LifecycleError,
    NotAuthorized,
    NotFound,
    RecoveryError,
    SessionError,
    SurehandError,
    ValidationFailed,
)
from surehand.model import ConflictCode, WriteTaskResult

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:surehand:problem:"
RETRY_AFTER_SECONDS = 1
WWW_AUTHENTICATE = 'Bearer realm="surehand"'

# write_task conflicts: the request contradicts the recorded submission (422), or the
# submission is in a state this request cannot proceed from (409).
CONFLICT_STATUS = {
    ConflictCode.DIGEST_MISMATCH: 422,
    ConflictCode.SCHEMA_MISMATCH: 422,
    ConflictCode.IN_PROGRESS: 409,
    ConflictCode.TASK_MISSING: 409,
    ConflictCode.TARGET_MISMATCH: 409,
}


def status_for(error: SurehandError) -> int:
    """The HTTP status of a typed error (most specific class first)."""
    if isinstance(error, Forbidden | NotAuthorized):
        return 403
    if isinstance(error, AuthError):
        return 401
    if isinstance(error, ValidationFailed):
        return 400
    if isinstance(error, NotFound):
        return 404
    if error.retryable and not isinstance(error, Conflict | RecoveryError):
        return 503  # the store, Redis or the broker is down: the same call may succeed later
    if isinstance(error, Conflict | LifecycleError | RecoveryError | SessionError):
        return 409
    if isinstance(error, ConfigError):
        return 500
    return 400


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    retryable: bool = False,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem+json response; ``extra`` adds members (``field``, ``result`` ...)."""
    body = {
        "type": f"{TYPE_PREFIX}{code}",
        "title": code.replace("_", " "),
        "status": status,
        "detail": detail,
        "code": code,
        "retryable": retryable,
        **extra,
    }
    all_headers = dict(headers or {})
    if retryable:
        all_headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))
    return JSONResponse(
        jsonable_encoder(body), status_code=status, headers=all_headers, media_type=PROBLEM_JSON
    )


def error_response(error: SurehandError) -> JSONResponse:
    """A typed error as problem+json (401s also carry ``WWW-Authenticate``)."""
    status = status_for(error)
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if status == 401 else None
    details = {k: v for k, v in error.details.items() if k not in ("code", "message")}
    return problem(
        status, error.code, error.message, retryable=error.retryable, headers=headers, **details
    )


def conflict_response(result: WriteTaskResult) -> JSONResponse:
    """A write_task conflict: the problem plus the full result record under ``result``."""
    assert result.conflict is not None
    code = result.conflict.code
    return problem(
        CONFLICT_STATUS[code],
        code.value,
        result.conflict.message,
        retryable=code is ConflictCode.IN_PROGRESS,
        result=result.to_dict(),
    )


def validation_response(error: RequestValidationError) -> JSONResponse:
    """FastAPI's request validation failure as one problem naming the first bad field."""
    first: dict[str, Any] = dict(error.errors()[0]) if error.errors() else {}
    location = [str(part) for part in first.get("loc", ())]
    if first.get("type") == "json_invalid":
        return problem(400, "malformed_json", "the request body is not valid JSON", field="body")
    field = ".".join(location[1:]) if len(location) > 1 else (location[0] if location else "")
    message = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    field = field or "body"
    return problem(400, ValidationFailed.code, f"{field}: {message}", field=field)


async def on_surehand_error(_request: Request, error: Exception) -> JSONResponse:
    """Exception handler: every SurehandError a route raises."""
    assert isinstance(error, SurehandError)
    return error_response(error)


async def on_validation_error(_request: Request, error: Exception) -> JSONResponse:
    """Exception handler: body, query or path validation (and malformed JSON)."""
    assert isinstance(error, RequestValidationError)
    return validation_response(error)


async def on_http_error(_request: Request, error: Exception) -> JSONResponse:
    """Exception handler: unknown routes and methods, in the same problem shape."""
    assert isinstance(error, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "http_error")
    return problem(error.status_code, code, str(error.detail))
