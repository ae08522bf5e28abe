"""Errors as ``application/problem+json`` (RFC 9457), built by :mod:`surehand.doors.problem` so the
HTTP API and the MCP tools share one shape and one mapping from typed errors to statuses.

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

from surehand.doors import problem as shape
from surehand.errors import SurehandError
from surehand.model import ConflictCode, WriteTaskResult

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = shape.TYPE_PREFIX
RETRY_AFTER_SECONDS = 1
WWW_AUTHENTICATE = 'Bearer realm="surehand"'
status_for = shape.status_for

# write_task conflicts: the request contradicts the recorded submission (422), or the
# submission is in a state this request cannot proceed from (409).
CONFLICT_STATUS = {
    ConflictCode.DIGEST_MISMATCH: 422,
    ConflictCode.SCHEMA_MISMATCH: 422,
    ConflictCode.IN_PROGRESS: 409,
    ConflictCode.TASK_MISSING: 409,
    ConflictCode.TARGET_MISMATCH: 409,
}
# Statuses FastAPI or Starlette raise themselves, by the code the problem gets. A 400 from
# FastAPI is always a body it could not parse (JSON that is not UTF-8, say).
HTTP_CODES = {
    400: "malformed_json",
    404: "not_found",
    405: "method_not_allowed",
    415: "unsupported_media_type",
}


def send(document: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    """A problem document as the response (``Retry-After`` added when retryable)."""
    all_headers = dict(headers or {})
    if document.get("retryable"):
        all_headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))
    return JSONResponse(
        jsonable_encoder(document),
        status_code=document["status"],
        headers=all_headers,
        media_type=PROBLEM_JSON,
    )


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
    return send(shape.body(status, code, detail, retryable=retryable, **extra), headers)


def error_response(error: SurehandError) -> JSONResponse:
    """A typed error as problem+json (401s also carry ``WWW-Authenticate``)."""
    document = shape.for_error(error)
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if document["status"] == 401 else {}
    if "retry_after" in document:
        headers["Retry-After"] = str(document["retry_after"])
    return send(document, headers)


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
    errors = list(error.errors())
    if any(item.get("type") == "json_invalid" for item in errors):
        return problem(400, "malformed_json", "the request body is not valid JSON", field="body")
    return send(shape.for_validation(errors, skip=1))


async def on_surehand_error(_request: Request, error: Exception) -> JSONResponse:
    """Exception handler: every SurehandError a route raises."""
    assert isinstance(error, SurehandError)
    return error_response(error)


async def on_validation_error(_request: Request, error: Exception) -> JSONResponse:
    """Exception handler: body, query or path validation (and malformed JSON)."""
    assert isinstance(error, RequestValidationError)
    return validation_response(error)


async def on_http_error(_request: Request, error: Exception) -> JSONResponse:
    """Exception handler: unknown routes and methods, unparsable bodies, in the same shape."""
    assert isinstance(error, StarletteHTTPException)
    code = HTTP_CODES.get(error.status_code, "http_error")
    if code == "malformed_json":
        return problem(400, code, "the request body is not valid JSON", field="body")
    headers = dict(error.headers) if error.headers else None
    return problem(error.status_code, code, str(error.detail), headers=headers)
