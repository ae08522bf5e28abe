"""What every console page shares (the signed-in viewer, rendering) and signing in and out.

Thin: each route checks the session, reads through the signed-in principal's
:class:`Surehand` view and renders a template. Lists are in ``list_routes``; TASKs, cases and
the approver's actions in ``record_routes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, cast

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from surehand.doors.problem import status_for
from surehand.errors import AuthError
from surehand.facade import Surehand
from surehand.principals import Principal
from surehand.ui import signin
from surehand.ui.signin import PREFIX, ConsoleSession, SignInRequired

if TYPE_CHECKING:
    from surehand.ui.app import Console

router = APIRouter()

Text = Annotated[str, Query(max_length=200)]
FormText = Annotated[str, Form(max_length=8192)]


@dataclass(frozen=True)
class Viewer:
    """The signed-in principal, its tenant's handle acting as it, and its session."""

    principal: Principal
    sh: Surehand
    session: ConsoleSession


def console_of(request: Request) -> Console:
    return cast("Console", request.app.state.console)


def signed_in(request: Request, *, touch: bool = True) -> Viewer:
    """The viewer of a live signed-in session (SignInRequired otherwise). ``touch``: this
    request is the user's (a page), not the live refresh, so it keeps the session from idling."""
    console = console_of(request)
    session = console.sessions.get(request.cookies.get(signin.COOKIE), touch=touch)
    if session is None or not signin.still_valid(console.auth, request, session.principal):
        raise SignInRequired
    principal = session.principal
    return Viewer(principal, console.sh.acting_as(principal), session)


def render(
    request: Request, name: str, viewer: Viewer | None, status: int = 200, **context: Any
) -> Response:
    """Render a page with the viewer and its CSRF token in the context."""
    context.update(viewer=viewer, csrf=viewer.session.csrf if viewer else context.get("csrf"))
    # Paused roles show on every page of a signed-in viewer (one small read of the store).
    context.setdefault("paused", viewer.sh.paused_roles() if viewer else [])
    templates = console_of(request).templates
    return templates.TemplateResponse(request, name, context, status_code=status)


def check_csrf(viewer: Viewer, submitted: str) -> None:
    signin.check_csrf(viewer.session.csrf, submitted)


# -- sign-in ---------------------------------------------------------------------------------


@router.get("/sign-in", name="sign_in")
def sign_in_page(request: Request, next: Text = "") -> Response:  # noqa: A002 (the parameter)
    """The sign-in form (a token, or the local ADMIN in open mode on loopback). A browser
    already signed in goes on to the page it asked for: its session is never replaced here."""
    target = signin.safe_next(next)
    console = console_of(request)
    if console.sessions.get(request.cookies.get(signin.COOKIE), touch=False) is not None:
        return RedirectResponse(target, status_code=303)
    nonce = signin.new_nonce()
    page = _sign_in_form(request, nonce, target)
    signin.set_sign_in_cookie(page, request, console.codec, nonce)
    return page


def _sign_in_form(
    request: Request, nonce: str, target: str, status: int = 200, error: str | None = None
) -> Response:
    console = console_of(request)
    return render(
        request,
        "sign_in.html",
        None,
        status,
        csrf=nonce,
        next=target,
        open_mode=console.auth.open,
        loopback=signin.client_on_loopback(request),
        error=error,
    )


@router.post("/sign-in")
def sign_in(
    request: Request,
    csrf_token: FormText = "",
    token: FormText = "",
    next: FormText = "",  # noqa: A002 (the form field)
) -> Response:
    """Exchange a token (once) for a session; 403 without the form's CSRF token, 429 for a
    client that keeps failing. Lands on the page that was asked for."""
    console = console_of(request)
    nonce = console.codec.decode(request.cookies.get(signin.SIGN_IN_COOKIE))
    signin.check_csrf(nonce, csrf_token)
    assert nonce is not None
    target = signin.safe_next(next)
    try:
        principal = signin.sign_in(console.auth, request, token)
    except AuthError as error:  # unknown token (401), open mode off loopback (403), 429
        page = _sign_in_form(request, nonce, target, status_for(error), error.message)
        if "retry_after" in error.details:
            page.headers["Retry-After"] = str(error.details["retry_after"])
        return page
    sid, session = console.sessions.start(principal)
    response = RedirectResponse(target, status_code=303)
    signin.clear_cookies(response)
    signin.set_session_cookie(response, request, sid, console.sessions.remaining(session))
    return response


@router.post("/sign-out")
def sign_out(request: Request, csrf_token: FormText = "") -> Response:
    """End the session on the server (CSRF-checked, so no other site can sign a user out):
    a copy of the cookie stops working too."""
    viewer = signed_in(request, touch=False)
    check_csrf(viewer, csrf_token)
    console_of(request).sessions.end(request.cookies.get(signin.COOKIE))
    response = RedirectResponse(f"{PREFIX}/sign-in", status_code=303)
    signin.clear_cookies(response)
    return response
