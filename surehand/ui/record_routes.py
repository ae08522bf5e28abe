"""The console's records: a TASK, its audit, a case, and the approver's acts on them.

Every act is the service call the API and the CLI make, as the signed-in principal (so its
name is recorded beside its role): a review is :meth:`Surehand.review`, approve and reject
are :meth:`Surehand.transition`, recover is :meth:`Surehand.recover`. A refused act shows the
page again with the reason and the status the API would give; nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from surehand.dispatcher.pauses import PAUSERS
from surehand.doors.problem import status_for
from surehand.errors import SurehandError, ValidationFailed
from surehand.model import Action, Admission
from surehand.ui import lists, views
from surehand.ui.routes import FormText, Viewer, check_csrf, render, signed_in
from surehand.ui.signin import PREFIX

router = APIRouter()
Effect = Literal["present", "absent"]


# -- TASK pages ------------------------------------------------------------------------------


@router.get("/tasks/{task_id}", name="task")
def task(request: Request, task_id: str, done: str = "") -> Response:
    """The TASK as written, what its approver may do now, REPORTs, attempts, history."""
    viewer = signed_in(request)
    return _task_page(request, viewer, task_id, done=DONE.get(done))


# What an act's redirect says (by code: a link cannot put words of its own on the page).
DONE = {
    "approved": "Approved: the TASK is done.",
    "rejected": "Sent back for rework: a new attempt will run with your reason.",
    "recover-reexecute": "Recover: admitted; a successor attempt runs the agent again.",
    "recover-reconcile_only": "Recover: the REPORT was built from the records.",
    "recover-hold_for_review": "Recover: the TASK is held for review; answer its case.",
    "recover-not_admitted": "Recover: not admitted; see the history for why.",
    "cancel-archived": "Cancelled: the TASK is archived; nothing of it runs.",
    "cancel-stopping": "Cancelled: its running session is being stopped; admission decides next.",
    "cancel-held": "Cancel recorded: the hold stays for the approver's review.",
    "cancel-pending": "Cancel recorded: the next reconciler pass ends the TASK.",
    "budget": "Budget raised (recorded with your name).",
    "budget-runs": "Budget raised: a successor attempt runs the agent again.",
    "released": "Released: it runs once its other dependencies are done.",
}


def _task_page(
    request: Request, viewer: Viewer, task_id: str, status: int = 200, **extra: Any
) -> Response:
    page = views.task_page(viewer.sh, task_id)
    may = views.may_review(viewer.principal, page.task)
    may_cancel = views.may_cancel(viewer.principal, page.task)
    return render(
        request, "task.html", viewer, status, page=page, may_act=may, may_cancel=may_cancel, **extra
    )


@router.get("/tasks/{task_id}/live")
def task_live(request: Request, task_id: str) -> Response:
    """The TASK page's records alone, for the page's refresh."""
    viewer = signed_in(request, touch=False)
    return render(request, "_task.html", viewer, page=views.task_page(viewer.sh, task_id))


@router.get("/tasks/{task_id}/audit", name="audit")
def audit(request: Request, task_id: str) -> Response:
    """Every admission decision of the TASK with its inputs, output and who decided."""
    viewer = signed_in(request)
    page = views.task_page(viewer.sh, task_id)
    return render(request, "audit.html", viewer, page=page, decisions=views.audit(page))


@router.get("/tasks/{task_id}/show.json")
def show_json(request: Request, task_id: str) -> Response:
    """The records behind the TASK and audit pages: ``surehand show TASK --json``."""
    viewer = signed_in(request)
    return JSONResponse(views.task_page(viewer.sh, task_id).to_dict())


@router.post("/tasks/{task_id}/approve")
def approve(
    request: Request, task_id: str, csrf_token: FormText = "", reason: FormText = ""
) -> Response:
    """The approver accepts the REPORT: review → done (``Surehand.transition``)."""
    return _act(request, task_id, csrf_token, _move(task_id, Action.APPROVE, reason or None))


@router.post("/tasks/{task_id}/reject")
def reject(
    request: Request, task_id: str, csrf_token: FormText = "", reason: FormText = ""
) -> Response:
    """The approver sends the TASK back for rework, saying why: review → active, a new
    rework round, published for a new attempt."""
    return _act(request, task_id, csrf_token, _move(task_id, Action.REJECT, reason))


def _move(task_id: str, action: Action, reason: str | None) -> Callable[[Viewer], str]:
    def move(viewer: Viewer) -> str:
        viewer.sh.transition(task_id, action, actor=viewer.principal.role, reason=reason)
        return "approved" if action is Action.APPROVE else "rejected"

    return move


@router.post("/tasks/{task_id}/recover")
def recover(request: Request, task_id: str, csrf_token: FormText = "") -> Response:
    """Ask for a successor of an interrupted TASK; admission decides from the evidence."""

    def ask(viewer: Viewer) -> str:
        outcome = viewer.sh.recover(task_id, actor=viewer.principal.role)
        return f"recover-{outcome.admission.value}"

    return _act(request, task_id, csrf_token, ask)


@router.post("/tasks/{task_id}/cancel")
def cancel(
    request: Request,
    task_id: str,
    csrf_token: FormText = "",
    reason: FormText = "",
    confirm: FormText = "",
) -> Response:
    """Cancel the TASK (``Surehand.cancel``) once the form's confirmation is ticked."""

    def ask(viewer: Viewer) -> str:
        if confirm != "yes":
            raise ValidationFailed("confirm", "tick the confirmation to cancel the TASK")
        outcome = viewer.sh.cancel(task_id, reason=reason, actor=viewer.principal.role)
        return f"cancel-{outcome.outcome}"

    return _act(request, task_id, csrf_token, ask)


@router.post("/tasks/{task_id}/budget")
def budget(
    request: Request,
    task_id: str,
    csrf_token: FormText = "",
    budget_usd: FormText = "",
    note: FormText = "",
) -> Response:
    """The approver raises what the TASK's LLM agent may spend (``Surehand.raise_budget``)."""

    def raise_it(viewer: Viewer) -> str:
        try:
            amount = float(budget_usd)
        except ValueError:
            raise ValidationFailed("budget_usd", "write an amount in USD, e.g. 5 or 2.50") from None
        _, case = viewer.sh.raise_budget(
            task_id, budget_usd=amount, note=note, actor=viewer.principal.role
        )
        return (
            "budget-runs"
            if case is not None and case.admission is Admission.REEXECUTE
            else "budget"
        )

    return _act(request, task_id, csrf_token, raise_it)


@router.post("/tasks/{task_id}/release")
def release(request: Request, task_id: str, csrf_token: FormText = "") -> Response:
    """The approver runs a TASK held by a dead dependency anyway (``Surehand.release_hold``)."""

    def ask(viewer: Viewer) -> str:
        viewer.sh.release_hold(task_id, actor=viewer.principal.role)
        return "released"

    return _act(request, task_id, csrf_token, ask)


def _act(request: Request, task_id: str, csrf_token: str, act: Callable[[Viewer], str]) -> Response:
    viewer = signed_in(request)
    check_csrf(viewer, csrf_token)
    try:
        done = act(viewer)
    except SurehandError as error:
        if status_for(error) == 404:
            raise  # another tenant's TASK is missing, not refused
        return _task_page(request, viewer, task_id, status_for(error), error=error.message)
    return RedirectResponse(f"{PREFIX}/tasks/{task_id}?done={done}", status_code=303)


# -- cases and reviews -----------------------------------------------------------------------


@router.get("/cases/{case_id}", name="case")
def case(request: Request, case_id: str, reviewed: bool = False) -> Response:
    """A case in plain words, its evidence and, for the TASK's approver while it is held,
    one answer per unsettled operation."""
    viewer = signed_in(request)
    return _case_page(request, viewer, case_id, reviewed=reviewed)


def _case_page(
    request: Request, viewer: Viewer, case_id: str, status: int = 200, **extra: Any
) -> Response:
    page = views.case_page(viewer.sh, case_id)
    context = {"page": page, "may_review": views.may_review(viewer.principal, page.task)}
    context.setdefault("form", {"answers": {}, "note": ""})
    context.update(extra)
    return render(request, "case.html", viewer, status, **context)


@router.post("/cases/{case_id}/review")
async def review(request: Request, case_id: str) -> Response:
    """Record the approver's answers through ``Surehand.review``; admission runs again."""
    viewer = signed_in(request)
    form = await request.form()
    fields = {key: str(value)[:8192] for key, value in form.items() if isinstance(value, str)}
    check_csrf(viewer, fields.get("csrf_token", ""))
    answers = _answers(fields)
    note = fields.get("note", "")
    try:
        viewer.sh.review(
            case_id,
            effect=cast(Effect, fields["effect"]) if "effect" in fields else None,
            operations=answers,
            note=note,
            actor=viewer.principal.role,
        )
    except SurehandError as error:
        if status_for(error) == 404:
            raise  # another tenant's case is missing, not refused
        form_back = {"answers": {str(k): v for k, v in answers.items()}, "note": note}
        status = status_for(error)
        return _case_page(request, viewer, case_id, status, error=error.message, form=form_back)
    return RedirectResponse(f"{PREFIX}/cases/{case_id}?reviewed=true", status_code=303)


def _answers(fields: dict[str, str]) -> dict[int, Effect]:
    """``effect-<operation id>`` fields → {operation id: answer} (others are ignored; the
    service refuses a bad answer, naming it)."""
    found: dict[int, Effect] = {}
    for key, value in fields.items():
        number = key.removeprefix("effect-")
        if number != key and number.isdigit() and len(number) < 19:
            found[int(number)] = cast(Effect, value)
    return found


# -- workers and sessions --------------------------------------------------------------------


@router.get("/workers", name="workers")
def workers(request: Request, done: str = "") -> Response:
    """Running sessions with their leases and heartbeats, lost sessions, the reconciler, and
    the paused roles (ADMIN and PM pause and resume them here)."""
    viewer = signed_in(request)
    return _workers_page(request, viewer, done=PAUSE_DONE.get(done))


PAUSE_DONE = {"paused": "Paused: no session of that role starts.", "resumed": "Resumed."}


def _workers_page(request: Request, viewer: Viewer, status: int = 200, **extra: Any) -> Response:
    may_pause = viewer.principal.role in PAUSERS
    page = lists.workers(viewer.sh)
    return render(request, "workers.html", viewer, status, page=page, may_pause=may_pause, **extra)


@router.post("/roles/pause")
def pause_role(
    request: Request, csrf_token: FormText = "", role: FormText = "", reason: FormText = ""
) -> Response:
    """Pause a role (``Surehand.pause_role``)."""

    def pause(viewer: Viewer) -> object:
        return viewer.sh.pause_role(role, reason=reason, actor=viewer.principal.role)

    return _role_act(request, csrf_token, pause, "paused")


@router.post("/roles/{role}/resume")
def resume_role(request: Request, role: str, csrf_token: FormText = "") -> Response:
    """Resume a role and publish what waited (``Surehand.resume_role``)."""

    def resume(viewer: Viewer) -> object:
        return viewer.sh.resume_role(role, actor=viewer.principal.role)

    return _role_act(request, csrf_token, resume, "resumed")


def _role_act(
    request: Request, csrf_token: str, act: Callable[[Viewer], object], done: str
) -> Response:
    viewer = signed_in(request)
    check_csrf(viewer, csrf_token)
    try:
        act(viewer)
    except SurehandError as error:
        return _workers_page(request, viewer, status_for(error), error=error.message)
    return RedirectResponse(f"{PREFIX}/workers?done={done}", status_code=303)


@router.get("/workers/live")
def workers_live(request: Request) -> Response:
    viewer = signed_in(request, touch=False)
    return render(request, "_workers.html", viewer, page=lists.workers(viewer.sh))
