"""The console's pages. Thin: each route checks the session, reads through the signed-in
principal's :class:`Surehand` view (``surehand.ui.views``) and renders a template. The one write,
a review, is :meth:`Surehand.review`, the service call the API's review route makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from surehand.errors import AuthError, SurehandError, ValidationFailed
from surehand.facade import Surehand
from surehand.principals import Principal
from surehand.problem import status_for
from surehand.ui import sessions, views
from surehand.ui.sessions import PREFIX, ConsoleSession, SignInRequired

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


def _console(request: Request) -> Console:
    return cast("Console", request.app.state.console)


def _session(request: Request) -> ConsoleSession | None:
    return _console(request).codec.decode(request.cookies.get(sessions.COOKIE))


def signed_in(request: Request) -> Viewer:
    """The viewer of a signed-in session (SignInRequired otherwise)."""
    console, session = _console(request), _session(request)
    principal = session.principal if session else None
    if session is None or principal is None:
        raise SignInRequired
    if not sessions.still_valid(console.auth, request, principal):
        raise SignInRequired
    return Viewer(principal, console.views(principal.tenant).acting_as(principal), session)


def render(
    request: Request, name: str, viewer: Viewer | None, status: int = 200, **context: Any
) -> Response:
    """Render a page with the viewer and its CSRF token in the context."""
    context.update(viewer=viewer, csrf=viewer.session.csrf if viewer else context.get("csrf"))
    templates = _console(request).templates
    return templates.TemplateResponse(request, name, context, status_code=status)


# -- sign-in ---------------------------------------------------------------------------------


@router.get("/sign-in", name="sign_in")
def sign_in_page(request: Request) -> Response:
    """The sign-in form (a token, or the local ADMIN in open mode on loopback)."""
    session = _session(request)
    if session is not None and session.principal is not None:
        return RedirectResponse(f"{PREFIX}/", status_code=303)
    session = session or sessions.new_session()
    response = _sign_in_form(request, session)
    sessions.set_cookie(response, request, _console(request).codec, session)
    return response


def _sign_in_form(
    request: Request, session: ConsoleSession, status: int = 200, error: str | None = None
) -> Response:
    console = _console(request)
    return render(
        request,
        "sign_in.html",
        None,
        status,
        csrf=session.csrf,
        open_mode=console.auth.open,
        loopback=sessions.client_on_loopback(request),
        error=error,
    )


@router.post("/sign-in")
def sign_in(request: Request, csrf_token: FormText = "", token: FormText = "") -> Response:
    """Exchange a token (once) for a signed session cookie; 403 without the form's CSRF token."""
    session = _session(request)
    sessions.check_csrf(session, csrf_token)
    assert session is not None
    try:
        principal = sessions.sign_in(_console(request).auth, request, token)
    except AuthError as error:  # an unknown token (401), or open mode off loopback (403)
        return _sign_in_form(request, session, status_for(error), error.message)
    response = RedirectResponse(f"{PREFIX}/", status_code=303)
    sessions.set_cookie(response, request, _console(request).codec, sessions.new_session(principal))
    return response


@router.post("/sign-out")
def sign_out(request: Request, csrf_token: FormText = "") -> Response:
    """End the session (CSRF-checked, so no other site can sign a user out)."""
    sessions.check_csrf(_session(request), csrf_token)
    response = RedirectResponse(f"{PREFIX}/sign-in", status_code=303)
    sessions.clear_cookie(response)
    return response


# -- board and held queue --------------------------------------------------------------------


def _filter(recipient: str, priority: str, q: str) -> views.BoardFilter:
    if priority and priority not in views.PRIORITIES:
        raise ValidationFailed("priority", f"must be one of {', '.join(views.PRIORITIES)}")
    return views.BoardFilter(recipient or None, priority or None, q)


@router.get("/", name="board")
def board(request: Request, recipient: Text = "", priority: Text = "", q: Text = "") -> Response:
    """TASKs by bucket, held TASKs first, with counts; refreshed live by a short poll."""
    viewer = signed_in(request)
    wanted = _filter(recipient, priority, q)
    columns = views.board(viewer.sh, wanted)
    return render(request, "board.html", viewer, columns=columns, wanted=wanted)


@router.get("/board/live")
def board_live(
    request: Request, recipient: Text = "", priority: Text = "", q: Text = ""
) -> Response:
    """The board's columns alone, for the page's poll."""
    viewer = signed_in(request)
    columns = views.board(viewer.sh, _filter(recipient, priority, q))
    return render(request, "_board.html", viewer, columns=columns)


@router.get("/held", name="held")
def held(request: Request) -> Response:
    """Every open case held for review."""
    viewer = signed_in(request)
    return render(request, "held.html", viewer, items=views.held(viewer.sh))


# -- TASK pages ------------------------------------------------------------------------------


@router.get("/tasks/{task_id}", name="task")
def task(request: Request, task_id: str) -> Response:
    """The TASK as written, its REPORTs, history, attempts, operations and cases."""
    viewer = signed_in(request)
    return render(request, "task.html", viewer, page=views.task_page(viewer.sh, task_id))


@router.get("/tasks/{task_id}/live")
def task_live(request: Request, task_id: str) -> Response:
    """The TASK page's records alone, for the page's poll."""
    viewer = signed_in(request)
    return render(request, "_task.html", viewer, page=views.task_page(viewer.sh, task_id))


@router.get("/tasks/{task_id}/audit", name="audit")
def audit(request: Request, task_id: str) -> Response:
    """Every admission decision of the TASK with its inputs and output."""
    viewer = signed_in(request)
    page = views.task_page(viewer.sh, task_id)
    return render(request, "audit.html", viewer, page=page, decisions=views.audit(page))


@router.get("/tasks/{task_id}/show.json")
def show_json(request: Request, task_id: str) -> Response:
    """The records behind the TASK and audit pages: ``surehand show TASK --json``."""
    viewer = signed_in(request)
    return JSONResponse(views.task_page(viewer.sh, task_id).to_dict())


# -- cases and reviews -----------------------------------------------------------------------


@router.get("/cases/{case_id}", name="case")
def case(request: Request, case_id: str, reviewed: bool = False) -> Response:
    """A case's evidence and, for the TASK's approver while it is held, the review form."""
    viewer = signed_in(request)
    return _case_page(request, viewer, case_id, reviewed=reviewed)


def _case_page(
    request: Request, viewer: Viewer, case_id: str, status: int = 200, **extra: Any
) -> Response:
    page = views.case_page(viewer.sh, case_id)
    context = {"page": page, "may_review": views.may_review(viewer.principal, page.task)}
    context.setdefault("form", {"effect": "", "note": ""})
    context.update(extra)
    return render(request, "case.html", viewer, status, **context)


@router.post("/cases/{case_id}/review")
def review(
    request: Request,
    case_id: str,
    csrf_token: FormText = "",
    effect: FormText = "",
    note: FormText = "",
) -> Response:
    """Record the approver's answer through ``Surehand.review``; admission runs again."""
    viewer = signed_in(request)
    sessions.check_csrf(viewer.session, csrf_token)
    stated = cast(Literal["present", "absent"], effect)
    try:
        viewer.sh.review(case_id, effect=stated, note=note, actor=viewer.principal.role)
    except SurehandError as error:
        if status_for(error) == 404:
            raise  # another tenant's case is missing, not refused
        return _refused(request, viewer, case_id, error, effect, note)
    return RedirectResponse(f"{PREFIX}/cases/{case_id}?reviewed=true", status_code=303)


def _refused(
    request: Request, viewer: Viewer, case_id: str, error: SurehandError, effect: str, note: str
) -> Response:
    form = {"effect": effect, "note": note}
    status = status_for(error)
    return _case_page(request, viewer, case_id, status, error=error.message, form=form)
