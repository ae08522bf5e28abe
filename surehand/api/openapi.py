"""The OpenAPI document describes what the API does: every status a route can answer, with
the problem schema for errors, served as ``application/problem+json``.

Routes declare their problem statuses with :func:`problems`; :func:`document` builds the
document once and fixes what FastAPI would otherwise state wrongly: its default ``422
Validation Error`` (this API answers bad input with 400) and ``application/json`` as the media
type of errors.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from surehand.api.schemas import Problem

PROBLEM_JSON = "application/problem+json"
TEXTS = {
    400: "Bad input (the problem names the field; malformed JSON is `malformed_json`); "
    "nothing was written.",
    401: "Missing or unknown bearer token.",
    403: "The caller's role may not do this (or the Origin header is not allowed).",
    404: "No such record in the caller's tenant (another tenant's records are not found).",
    409: "The record's state does not allow this (a lifecycle rule, a conflict, in_progress).",
    413: "The body is larger than the limit; nothing was written.",
    421: "The Host header names a host this server does not answer (DNS rebinding "
    "protection); see SUREHAND_API_ALLOWED_HOSTS.",
    422: "digest_mismatch or schema_mismatch: the same id with a different request.",
    429: "too_many_attempts: this client, or this token, failed too often; wait Retry-After "
    "seconds (a valid token is accepted meanwhile).",
    503: "The database or Redis is unavailable; retry after Retry-After.",
}
# Every request passes the Host check and the store; only these never touch the store.
EVERYWHERE = (403, 421)
READ = (400, 401, *EVERYWHERE, 429, 503)
ONE = (*READ, 404)
WRITE = (*ONE, 409, 413)
_FASTAPI_VALIDATION = {"HTTPValidationError", "ValidationError"}


def problems(*statuses: int, **texts: str) -> dict[int | str, dict[str, Any]]:
    """Response declarations for ``statuses``; ``texts`` (``s409="..."``) override a text."""
    return {
        status: {"model": Problem, "description": texts.get(f"s{status}", TEXTS[status])}
        for status in sorted(set(statuses))
    }


def document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (built once), with errors as problem+json only."""
    if app.openapi_schema is None:
        spec = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        for operation in _operations(spec):
            _fix_responses(operation["responses"])
        components = spec.get("components", {}).get("schemas", {})
        for name in _FASTAPI_VALIDATION:
            components.pop(name, None)
        app.openapi_schema = spec
    return app.openapi_schema


def _operations(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for path in spec.get("paths", {}).values() for op in path.values()]


def _fix_responses(responses: dict[str, Any]) -> None:
    default_422 = responses.get("422", {}).get("description") == "Validation Error"
    if default_422:
        del responses["422"]
    for status, response in responses.items():
        content = response.get("content", {})
        if int(status) >= 400 and "application/json" in content:
            content[PROBLEM_JSON] = content.pop("application/json")
