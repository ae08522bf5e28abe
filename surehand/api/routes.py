"""The ``/v1`` routes. Thin: each one authenticates, calls the facade of the caller's tenant,
and returns the record's ``to_dict()``; errors become problem+json in ``problems``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import JSONResponse

from surehand.api.deps import CallerDep, submission_id
from surehand.api.openapi import ONE, READ, WRITE, problems
from surehand.api.problems import conflict_response
from surehand.api.schemas import (
    ID_PATTERN,
    ROLE_PATTERN,
    BudgetBody,
    CancelBody,
    PauseBody,
    RecoverBody,
    ReleaseBody,
    ReportBody,
    ReviewBody,
    TaskRequest,
    TransitionBody,
)
from surehand.model import Bucket, CaseState, Disposition

router = APIRouter(prefix="/v1")

MAX_LIMIT = 1000
MAX_OFFSET = 2**31 - 1

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="The submission id (client_submission_id): reuse it on every retry.",
        pattern=ID_PATTERN,
    ),
]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
Recipient = Annotated[str | None, Query(pattern=ROLE_PATTERN, max_length=32)]
TaskIdPath = Annotated[str, Path(pattern=ID_PATTERN, description="A TASK id.")]
CaseIdPath = Annotated[str, Path(pattern=ID_PATTERN, description="An interruption case id.")]
SubmissionPath = Annotated[str, Path(pattern=ID_PATTERN, description="A client_submission_id.")]

_CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {"description": "Created: this call created the TASK."},
    200: {"description": "Reused: an earlier call with this id created it; nothing new."},
    **problems(
        *WRITE,
        422,
        s403="sender names a role other than the caller's (only ADMIN may), or the Origin "
        "header is not allowed.",
        s409="in_progress (retry after Retry-After), task_missing, target_mismatch: codes "
        "kept for older clients, no longer answered (a receipt is committed with its TASK).",
    ),
}


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=headers)


@router.post("/tasks", status_code=201, responses=_CREATE_RESPONSES, tags=["tasks"])
def create_task(
    request: TaskRequest, caller: CallerDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Create a TASK once per submission id (``write_task``).

    Send the id as ``Idempotency-Key`` or ``client_submission_id``. A retry with the same id
    and request returns the first result with 200; a different request under the same id is
    a 422 conflict that changes nothing. Without an id the TASK has no retry guarantee.
    """
    csid = submission_id(idempotency_key, request.client_submission_id)
    if csid != request.client_submission_id:
        request = request.model_copy(update={"client_submission_id": csid})
    result = caller.sh.write_task(request)
    if result.disposition is Disposition.CONFLICT:
        return conflict_response(result)
    status = 201 if result.disposition is Disposition.CREATED else 200
    location = {"Location": f"/v1/tasks/{result.task_id}"} if result.task_id else None
    return _json(result.to_dict(), status, location)


@router.get("/tasks", tags=["tasks"], responses=problems(*READ))
def list_tasks(
    caller: CallerDep,
    bucket: Bucket | None = None,
    recipient: Recipient = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> JSONResponse:
    """TASKs of the caller's tenant, newest first."""
    found = caller.sh.list_tasks(bucket=bucket, recipient=recipient, limit=limit, offset=offset)
    return _json({"tasks": [t.to_dict() for t in found], "limit": limit, "offset": offset})


@router.get("/tasks/{task_id}", tags=["tasks"], responses=problems(*ONE))
def get_task(task_id: TaskIdPath, caller: CallerDep) -> JSONResponse:
    """One TASK (another tenant's TASK is 404, like a missing one)."""
    return _json(caller.sh.get_task(task_id).to_dict())


@router.get("/tasks/{task_id}/history", tags=["tasks"], responses=problems(*ONE))
def task_history(task_id: TaskIdPath, caller: CallerDep) -> JSONResponse:
    """The TASK's append-only history, oldest first."""
    return _json({"history": [event.to_dict() for event in caller.sh.history(task_id)]})


@router.get("/tasks/{task_id}/attempts", tags=["tasks"], responses=problems(*ONE))
def task_attempts(task_id: TaskIdPath, caller: CallerDep) -> JSONResponse:
    """Every attempt at the TASK, oldest first: its state, cause and error, and in
    ``details`` the tails of the agent's output, the CLI's accounting (tokens, model,
    cost) and how its effects were observed."""
    return _json({"attempts": [item.to_dict() for item in caller.sh.attempts(task_id)]})


@router.get("/tasks/{task_id}/reports", tags=["reports"], responses=problems(*ONE))
def task_reports(task_id: TaskIdPath, caller: CallerDep) -> JSONResponse:
    """Every REPORT revision on the TASK."""
    return _json({"reports": [item.to_dict() for item in caller.sh.reports(task_id)]})


_REPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    201: {"description": "A new REPORT revision."},
    200: {"description": "Deduplicated: the same REPORT was written before; nothing new."},
    **problems(*WRITE, s403="Only the TASK's recipient may report (or the Origin is refused)."),
}


@router.post(
    "/tasks/{task_id}/reports", status_code=201, tags=["reports"], responses=_REPORT_RESPONSES
)
def create_report(
    task_id: TaskIdPath, body: ReportBody, caller: CallerDep, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Write a REPORT (``write_report``): 201 new revision, 200 deduplicated (nothing written)."""
    result = caller.sh.write_report(
        task_id=task_id,
        reporter=caller.acting(body.reporter),
        body=body.body,
        status=body.status,
        recipient=body.recipient,
        client_submission_id=submission_id(idempotency_key, body.client_submission_id),
    )
    return _json(result.to_dict(), 200 if result.deduplicated else 201)


@router.post("/tasks/{task_id}/transitions", tags=["tasks"], responses=problems(*WRITE))
def transition(task_id: TaskIdPath, body: TransitionBody, caller: CallerDep) -> JSONResponse:
    """Move the TASK by a lifecycle action, acting as the caller's role."""
    task = caller.sh.transition(
        task_id,
        body.action,
        actor=caller.acting(body.actor),
        reason=body.reason,
        report_id=body.report_id,
    )
    return _json(task.to_dict())


@router.post("/tasks/{task_id}/recover", tags=["recovery"], responses=problems(*WRITE))
def recover(
    task_id: TaskIdPath, caller: CallerDep, body: RecoverBody | None = None
) -> JSONResponse:
    """Ask for a successor of an interrupted TASK; admission decides from the evidence."""
    outcome = caller.sh.recover(task_id, actor=caller.acting(body.actor if body else None))
    return _json(outcome.to_dict())


@router.post(
    "/tasks/{task_id}/cancel",
    tags=["tasks"],
    responses=problems(
        *WRITE, s403="Only the TASK's sender, its approvers or an ADMIN may cancel it."
    ),
)
def cancel(task_id: TaskIdPath, body: CancelBody, caller: CallerDep) -> JSONResponse:
    """Cancel the TASK: in inbox it is archived and never claimed; a running session is
    stopped within seconds (its attempt ends ``cancelled`` through admission); a held TASK
    keeps its hold. Asking again changes nothing (``repeated``)."""
    outcome = caller.sh.cancel(task_id, reason=body.reason, actor=caller.acting(body.actor))
    return _json(outcome.to_dict())


@router.post(
    "/tasks/{task_id}/release",
    tags=["tasks"],
    responses=problems(*WRITE, s403="Only the TASK's approvers may release it."),
)
def release_hold(
    task_id: TaskIdPath, caller: CallerDep, body: ReleaseBody | None = None
) -> JSONResponse:
    """Run a TASK held by an archived or cancelled dependency anyway (its approver): the dead
    dependency is dropped; it is dispatched once its other dependencies are done. 409
    ``illegal_transition`` if it is not so held. To drop it instead, cancel it."""
    actor = caller.acting(body.actor if body else None)
    return _json({"task": caller.sh.release_hold(task_id, actor=actor).to_dict()})


RolePath = Annotated[str, Path(pattern=ROLE_PATTERN, max_length=32, description="A role code.")]


@router.get("/roles/paused", tags=["roles"], responses=problems(*READ))
def paused_roles(caller: CallerDep) -> JSONResponse:
    """The paused roles of the caller's tenant."""
    return _json({"paused": [pause.to_dict() for pause in caller.sh.paused_roles()]})


@router.post(
    "/roles/{role}/pause",
    tags=["roles"],
    responses=problems(*WRITE, s403="Only ADMIN or PM may pause a role."),
)
def pause_role(role: RolePath, caller: CallerDep, body: PauseBody | None = None) -> JSONResponse:
    """Pause a role: no session of it starts (its TASKs wait in inbox); running ones go on."""
    actor = caller.acting(body.actor if body else None)
    pause = caller.sh.pause_role(role, reason=body.reason if body else "", actor=actor)
    return _json(pause.to_dict())


@router.post(
    "/roles/{role}/resume",
    tags=["roles"],
    responses=problems(*WRITE, s403="Only ADMIN or PM may resume a role."),
)
def resume_role(role: RolePath, caller: CallerDep, body: PauseBody | None = None) -> JSONResponse:
    """Resume a role and publish its TASKs that waited."""
    waiting = caller.sh.resume_role(role, actor=caller.acting(body.actor if body else None))
    return _json({"role": role, "resumed": True, "waiting": waiting})


@router.post("/tasks/{task_id}/budget", tags=["recovery"], responses=problems(*WRITE))
def raise_budget(task_id: TaskIdPath, body: BudgetBody, caller: CallerDep) -> JSONResponse:
    """Raise what the TASK's LLM agent may spend (its approver; recorded). A TASK held because
    its budget was spent goes through admission again: with money left, a successor runs."""
    task, case = caller.sh.raise_budget(
        task_id, budget_usd=body.budget_usd, note=body.note, actor=caller.acting(body.actor)
    )
    return _json({"task": task.to_dict(), "case": case.to_dict() if case else None})


@router.get("/cases", tags=["recovery"], responses=problems(*READ))
def list_cases(
    caller: CallerDep,
    state: CaseState | None = None,
    limit: Limit = 100,
) -> JSONResponse:
    """Interruption cases of the caller's tenant, newest first."""
    return _json({"cases": [c.to_dict() for c in caller.sh.cases(state=state, limit=limit)]})


@router.get("/cases/{case_id}", tags=["recovery"], responses=problems(*ONE))
def get_case(case_id: CaseIdPath, caller: CallerDep) -> JSONResponse:
    """One interruption case of the caller's tenant."""
    return _json(caller.sh.case(case_id).to_dict())


@router.post("/cases/{case_id}/review", tags=["recovery"], responses=problems(*WRITE))
def review(case_id: CaseIdPath, body: ReviewBody, caller: CallerDep) -> JSONResponse:
    """Release a held TASK: the approver states whether the effect happened (403 otherwise)."""
    case = caller.sh.review(
        case_id,
        effect=body.effect,
        operations=body.operations,
        note=body.note,
        actor=caller.acting(body.actor),
    )
    return _json(case.to_dict())


@router.get("/submissions/{client_submission_id}", tags=["tasks"], responses=problems(*ONE))
def diagnose(client_submission_id: SubmissionPath, caller: CallerDep) -> JSONResponse:
    """Read-only diagnostics of a submission's receipt; never repairs anything."""
    return _json(caller.sh.diagnose_submission(client_submission_id).to_dict())
