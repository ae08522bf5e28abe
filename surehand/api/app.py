"""The FastAPI application: routes, auth, problem+json errors, host check, body limit, health
and metrics."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from surehand import __version__, metrics
from surehand.api import openapi, problems
from surehand.api.deps import AdminDep, check_metrics_reader
from surehand.api.docs import add_docs
from surehand.api.routes import router
from surehand.dispatcher import health
from surehand.doors.auth import Authenticator
from surehand.doors.hosts import HostAllowlist, HostRule
from surehand.doors.limits import BodyLimit
from surehand.errors import SurehandError
from surehand.facade import Surehand
from surehand.ui import create_console

log = logging.getLogger(__name__)

DESCRIPTION = """\
Create each TASK once, take it over only on evidence.

* `POST /v1/tasks` with an `Idempotency-Key` header (or `client_submission_id`): **201**
  created, **200** reused (a retry), **422** same id with a different request, **409**
  in progress (see `Retry-After`). Errors are `application/problem+json` with a `code`.
* Authenticate with `Authorization: Bearer <token>` (tokens map to name, role and tenant).
* Only loopback `Host` names and those in `SUREHAND_API_ALLOWED_HOSTS` are answered (421).
"""


def create_app(sh: Surehand | None = None) -> FastAPI:
    """The API for ``sh`` (default: ``Surehand.from_env()``), with its own auth table.

    Raises SchemaNotReady when a Postgres schema is not migrated (`surehand db upgrade`). The
    caller binds it; ``surehand api`` and ``surehand up`` check first that an API without
    tokens only listens on loopback (``Authenticator.check_bind``).
    """
    surehand = sh or Surehand.from_env()
    # Migrate (SQLite) or verify (Postgres) now, in one thread: concurrent first requests
    # would otherwise race into the migration.
    surehand.store.ensure_schema()
    hosts = HostRule.from_settings(surehand.settings)
    docs_on = surehand.settings.api_docs
    app = FastAPI(
        title="surehand",
        version=__version__,
        description=DESCRIPTION,
        docs_url=None,  # our own page (api/docs.py): Swagger UI loads scripts from a CDN
        redoc_url=None,
        openapi_url="/openapi.json" if docs_on else None,
        lifespan=_publishing,
    )
    app.state.surehand = surehand
    app.state.auth = Authenticator(surehand.settings)
    app.state.store_metrics = metrics.store_registry(surehand.store)
    app.state.anonymous_metrics = metrics.store_registry(surehand.store, tenants=False)
    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    app.include_router(router)
    if docs_on:
        add_docs(app)
    app.add_api_route("/", _to_console, methods=["GET"], include_in_schema=False)
    # The review console (/ui/): inside the host allowlist and body limit, signed in with
    # the same principals, acting through the same runtime.
    app.mount("/ui", create_console(app.state.auth, surehand), name="ui")
    _add_operations(app)
    _add_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=surehand.settings.api_max_body_bytes)
    # Outermost: a request for a name this server does not answer goes no further.
    app.add_middleware(HostAllowlist, rule=hosts)
    return app


@asynccontextmanager
async def _publishing(app: FastAPI) -> AsyncIterator[None]:
    """While served, created TASKs are published by the runtime's background publisher (the
    outbox), not on the request path."""
    runtime = app.state.surehand.runtime
    runtime.start_publishing()
    try:
        yield
    finally:
        runtime.stop_publishing()


def _add_operations(app: FastAPI) -> None:
    app.add_api_route(
        "/healthz",
        healthz,
        methods=["GET"],
        tags=["operations"],
        responses={**openapi.problems(503, 403, 421), 200: {"description": "Live and ready."}},
    )
    app.add_api_route(
        "/v1/admin/health",
        health_details,
        methods=["GET"],
        tags=["operations"],
        responses=openapi.problems(401, 403, 421, 429, 503),
    )
    app.add_api_route(
        "/metrics",
        metrics_endpoint,
        methods=["GET"],
        tags=["operations"],
        response_class=Response,
        responses={
            200: {"description": "Prometheus text.", "content": {"text/plain": {}}},
            **openapi.problems(
                401,
                403,
                421,
                429,
                s401="With API tokens or SUREHAND_METRICS_TOKEN set: send that token.",
                s403="An API token (any tenant's) is not the metrics token, a token-less API's "
                "caller is not a loopback client that came straight here, or the Origin is "
                "refused.",
                s429="This client, or this token, failed too often: wait Retry-After seconds.",
            ),
        },
    )


def _add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SurehandError, problems.on_surehand_error)
    app.add_exception_handler(RequestValidationError, problems.on_validation_error)
    app.add_exception_handler(StarletteHTTPException, problems.on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)


def _to_console() -> RedirectResponse:
    """``/`` is the review console (a person who opens the server's address lands there)."""
    return RedirectResponse("/ui/", status_code=307)


def _readiness(sh: Surehand, *, public: bool) -> JSONResponse | None:
    """None when the database answers and its schema is current, else the 503 problem.

    ``public``: the answer names nothing (no database, host or user -- a driver's message
    can name all three); the error is logged here, and ``/v1/admin/health`` tells an ADMIN.
    """
    try:
        current = health.is_ready(sh.services)
    except SurehandError as error:
        if public:
            log.warning("health check: the database does not answer: %s", error.message)
            return problems.problem(
                503, "not_ready", "not ready: the store does not answer", retryable=True
            )
        return problems.problem(503, error.code, error.message, retryable=True)
    if not current:
        return problems.problem(
            503, "schema_not_ready", "run `surehand db upgrade`", retryable=True
        )
    return None


def healthz(request: Request) -> JSONResponse:
    """Liveness and readiness: the database answers and its schema is current.

    Public, so it says nothing about the configuration; ``/v1/admin/health`` does, to ADMINs.
    """
    return _readiness(request.app.state.surehand, public=True) or JSONResponse({"status": "ok"})


def health_details(request: Request, _admin: AdminDep) -> JSONResponse:
    """Readiness with the details an operator wants: database (no password) and version."""
    sh: Surehand = request.app.state.surehand
    details: dict[str, Any] = {"database": sh.store.describe(), "version": __version__}
    refused = _readiness(sh, public=False)
    if refused is not None:
        return refused
    return JSONResponse({"status": "ok", **details})


def metrics_endpoint(request: Request) -> Response:
    """Prometheus metrics of this process, and TASKs by tenant and bucket from the database.

    Open to loopback clients of an API without tokens, with every tenant counted as one
    (``tenant="_all"``: no tenant's name); SUREHAND_METRICS_TOKEN reads them by tenant.
    """
    operator = check_metrics_reader(request)
    state = request.app.state
    payload, content_type = metrics.exposition(
        state.store_metrics if operator else state.anonymous_metrics
    )
    return Response(payload, media_type=content_type)


async def _on_unexpected(_request: Request, error: Exception) -> JSONResponse:
    # Log the traceback here; the client gets a stable shape with no internals in it.
    log.exception("unexpected error in the HTTP API", exc_info=error)
    return problems.problem(500, "internal_error", "unexpected server error; see the server log")
