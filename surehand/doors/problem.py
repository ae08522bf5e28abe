"""The one error shape of the network doors: an RFC 9457 problem document.

The HTTP API sends it as ``application/problem+json``; MCP tools return it as the structured
content of a tool error (``{"error": problem}``). Both build it here, from a typed
:class:`~surehand.errors.SurehandError` or from a pydantic validation failure, so a client sees
the same ``type``, ``code``, ``title``, ``detail``, ``status``, ``retryable`` and (for bad input)
``field`` whichever door it used. No stack trace and no driver message is ever put in one.

Framework-free on purpose: the MCP door must not need FastAPI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from surehand.errors import (
    AuthError,
    ConfigError,
    Conflict,
    Forbidden,
    LifecycleError,
    NotAuthorized,
    NotFound,
    RecoveryError,
    ReportRejected,
    SessionError,
    SessionLimitReached,
    SurehandError,
    TooManyAttempts,
    TooManyRequests,
    ValidationFailed,
)

TYPE_PREFIX = "urn:surehand:problem:"
# A REPORT refused because the caller is not the TASK's recipient is about who calls (403),
# not about the TASK's state (409); the service layer names it with this reason.
FORBIDDEN_REPORT_REASONS = frozenset({"reporter_mismatch"})


def status_for(error: SurehandError) -> int:
    """The HTTP status of a typed error (most specific class first)."""
    if isinstance(error, TooManyAttempts | TooManyRequests | SessionLimitReached):
        return 429
    if isinstance(error, Forbidden | NotAuthorized) or _wrong_reporter(error):
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


def _wrong_reporter(error: SurehandError) -> bool:
    return isinstance(error, ReportRejected) and (
        error.details.get("reason") in FORBIDDEN_REPORT_REASONS
    )


def body(
    status: int, code: str, detail: str, *, retryable: bool = False, **extra: Any
) -> dict[str, Any]:
    """A problem document; ``extra`` adds members (``field``, ``result`` ...)."""
    return {
        "type": f"{TYPE_PREFIX}{code}",
        "title": code.replace("_", " "),
        "status": status,
        "detail": detail,
        "code": code,
        "retryable": retryable,
        **extra,
    }


def for_error(error: SurehandError) -> dict[str, Any]:
    """The problem document of a typed error (its details become members)."""
    details = {k: v for k, v in error.details.items() if k not in ("code", "message")}
    return body(status_for(error), error.code, error.message, retryable=error.retryable, **details)


def for_validation(errors: Sequence[Mapping[str, Any]], *, skip: int = 0) -> dict[str, Any]:
    """A pydantic validation failure as one 400 problem naming the first bad field.

    ``skip`` drops leading location parts that are not the client's field names (FastAPI's
    ``body``/``query``/``path``).
    """
    first = dict(errors[0]) if errors else {}
    location = [str(part) for part in first.get("loc", ())]
    field = ".".join(location[skip:]) or ".".join(location) or "body"
    message = str(first.get("msg", "is invalid")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        message = "is not a known field of this request"
    return body(400, ValidationFailed.code, f"{field}: {message}", field=field)
