"""The review console's ASGI app, mounted by the HTTP API at ``/ui``.

Server-rendered pages (Jinja2 templates in ``templates/``, one stylesheet and one small script
in ``static/``), readable without JavaScript. The API's host allowlist and body limit wrap this
app as they wrap the API (it is mounted inside them); its own handlers turn typed errors into
HTML pages with the same statuses the API gives (``surehand.doors.problem.status_for``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from surehand.doors.auth import Authenticator
from surehand.doors.labels import operation_label
from surehand.doors.problem import status_for
from surehand.doors.rate import RateLimit
from surehand.errors import SurehandError
from surehand.facade import Surehand
from surehand.ui import list_routes, record_routes
from surehand.ui.routes import router
from surehand.ui.signin import PREFIX, SessionStore, SignInCodec, SignInRequired
from surehand.ui.views import approver_names, consequence, where_to_check

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
# Pages load only this origin's stylesheet and script; no frames, no inline code.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@dataclass(frozen=True)
class Console:
    """What every console route needs: who may sign in, the handle, cookies, templates."""

    auth: Authenticator
    sh: Surehand
    sessions: SessionStore
    codec: SignInCodec
    templates: Jinja2Templates
    searches: RateLimit  # text searches per principal (they read bodies)


def create_console(auth: Authenticator, sh: Surehand) -> FastAPI:
    """The console: signs in the principals ``auth`` knows, and acts through ``sh``'s runtime
    as the signed-in principal (:meth:`Surehand.acting_as`)."""
    console = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    settings = sh.settings
    store = SessionStore(settings.console_idle_seconds, settings.console_session_seconds)
    searches = RateLimit(settings.console_searches_per_minute)
    console.state.console = Console(auth, sh, store, SignInCodec(), _templates(), searches)
    console.include_router(router)
    console.include_router(list_routes.router)
    console.include_router(record_routes.router)
    console.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    console.add_exception_handler(SignInRequired, _to_sign_in)
    console.add_exception_handler(SurehandError, _on_error)
    console.add_exception_handler(RequestValidationError, _on_bad_request)
    console.add_exception_handler(StarletteHTTPException, _on_http_error)
    console.add_exception_handler(Exception, _on_unexpected)
    console.middleware("http")(_headers)
    return console


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=HERE / "templates")
    templates.env.filters["when"] = _when
    templates.env.filters["compact"] = _compact
    templates.env.globals["base"] = PREFIX
    templates.env.globals["consequence"] = consequence
    templates.env.globals["approvers"] = approver_names
    templates.env.globals["operation_label"] = operation_label
    templates.env.globals["where_to_check"] = where_to_check
    return templates


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return value.strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


Next = Callable[[Request], Awaitable[Response]]


async def _headers(request: Request, call_next: Next) -> Response:
    response = await call_next(request)
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if not request.url.path.startswith(f"{PREFIX}/static/"):
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def error_page(request: Request, status: int, title: str, detail: str) -> Response:
    """An HTML error page (the console's answer where the API would send problem+json)."""
    console: Console = request.app.state.console
    context = {"status": status, "title": title, "detail": detail, "viewer": None}
    return console.templates.TemplateResponse(request, "error.html", context, status_code=status)


async def _to_sign_in(request: Request, _error: Exception) -> Response:
    """To the sign-in page, which brings the user back to the page asked for (a page, not a
    live fragment or a form's POST)."""
    path = request.url.path
    if request.method != "GET" or path.endswith("/live"):
        return RedirectResponse(f"{PREFIX}/sign-in", status_code=303)
    asked = path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/sign-in?{urlencode({'next': asked})}", status_code=303)


async def _on_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, SurehandError)
    status = status_for(error)
    title = {403: "Not allowed", 404: "Not found", 400: "Bad request"}.get(status, "Refused")
    page = error_page(request, status, title, error.message)
    if "retry_after" in error.details:  # 429: a throttled sign-in, a rate-limited search
        page.headers["Retry-After"] = str(error.details["retry_after"])
    return page


async def _on_bad_request(request: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    fields = ", ".join(str(item.get("loc", ["?"])[-1]) for item in error.errors())
    return error_page(request, 400, "Bad request", f"invalid value for: {fields}")


async def _on_http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    title = "Not found" if error.status_code == 404 else "Refused"
    return error_page(request, error.status_code, title, str(error.detail))


async def _on_unexpected(request: Request, error: Exception) -> Response:
    log.exception("unexpected error in the review console", exc_info=error)
    return error_page(request, 500, "Server error", "unexpected server error; see the server log")
