"""The FastAPI application: routes, auth, problem+json errors, body limit, health and metrics."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException

from surehand import __version__, metrics
from surehand.api import problems
from surehand.api.limits import BodyLimit
from surehand.api.routes import router
from surehand.errors import SurehandError
from surehand.facade import Surehand
from surehand.principals import Authenticator, TenantViews
from surehand.store import migrate

log = logging.getLogger(__name__)

DESCRIPTION = """\
Create each TASK once, take it over only on evidence.

* `POST /v1/tasks` with an `Idempotency-Key` header (or `client_submission_id`): **201**
  created, **200** reused (a retry), **422** same id with a different request, **409**
  in progress (see `Retry-After`). Errors are `application/problem+json` with a `code`.
* Authenticate with `Authorization: Bearer <token>` (tokens map to name, role and tenant).
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
    auth = Authenticator(surehand.settings)
    views = TenantViews(surehand)
    views.warm()
    app = FastAPI(
        title="surehand",
        version=__version__,
        description=DESCRIPTION,
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.surehand = surehand
    app.state.auth = auth
    app.state.views = views
    app.include_router(router)
    app.add_exception_handler(SurehandError, problems.on_surehand_error)
    app.add_exception_handler(RequestValidationError, problems.on_validation_error)
    app.add_exception_handler(StarletteHTTPException, problems.on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["operations"])
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"], tags=["operations"])
    # Outermost, so an oversized body is refused before routing, auth or parsing.
    app.add_middleware(BodyLimit, max_bytes=surehand.settings.api_max_body_bytes)
    return app


def healthz(request: Request) -> JSONResponse:
    """Liveness and readiness: the database answers and its schema is current."""
    sh: Surehand = request.app.state.surehand
    try:
        with sh.store.snapshot() as connection:
            connection.execute(text("SELECT 1"))
        current = migrate.is_current(sh.store.engine)
    except SurehandError as error:
        return problems.problem(503, error.code, error.message, retryable=True)
    if not current:
        return problems.problem(
            503, "schema_not_ready", "run `surehand db upgrade`", retryable=True
        )
    return JSONResponse({"status": "ok", "database": sh.store.describe(), "version": __version__})


def metrics_endpoint() -> Response:
    """Prometheus metrics of this process (each API and worker process exposes its own)."""
    payload, content_type = metrics.exposition()
    return Response(payload, media_type=content_type)


async def _on_unexpected(_request: Request, error: Exception) -> JSONResponse:
    # Log the traceback here; the client gets a stable shape with no internals in it.
    log.exception("unexpected error in the HTTP API", exc_info=error)
    return problems.problem(500, "internal_error", "unexpected server error; see the server log")
