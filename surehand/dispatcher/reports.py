"""``write_report``: a REPORT on a TASK, with the FCoP/CodeFlowMu dedupe and revision rules.

An existing REPORT in the same series (task, reporter, recipient, status) with either the same
non-empty ``client_submission_id`` or the same rework round and body hash is returned with
``deduplicated=True`` and nothing is written. Otherwise a new revision supersedes the series'
latest. Only the task's recipient may report, only to the task's sender, and only while the
TASK is ``active``.

Races: the TASK row is locked for the whole write, so callers on one TASK take turns and the
second sees the first's REPORT. Should two callers still collide (a caller of
:func:`write_report_in` that did not hold the lock), the unique constraints refuse the second
INSERT and :func:`write_report` re-runs the whole decision in a new transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from surehand.clock import utc_day
from surehand.digest import sha256_hex
from surehand.dispatcher.context import Services
from surehand.errors import Conflict, DuplicateKey, ReportRejected, TaskNotFound, ValidationFailed
from surehand.model import Bucket, EventKind, Report, Task, WriteReportResult
from surehand.operation_requests import MAX_VALUE_BYTES, check_json
from surehand.principals import Principal, acting_for
from surehand.requests import ReportRequest, parse_report_request, validate_tenant
from surehand.store import counters, events, tasks
from surehand.store import reports as report_rows

log = logging.getLogger(__name__)

MAX_TRIES = 5  # each retry follows a lost race; more than a few means something is wrong


def body_hash(body: str) -> str:
    """CodeFlowMu's ``content_hash``: SHA-256 of the body with CRLF -> LF, stripped."""
    return sha256_hex(body.replace("\r\n", "\n").strip())


def write_report(
    services: Services,
    request: ReportRequest | Mapping[str, Any],
    *,
    tenant: str,
    principal: Principal | None = None,
) -> WriteReportResult:
    """Write a REPORT, or return the one it duplicates; a bad request writes nothing.

    ``reporter`` is ``principal``'s role; only an ADMIN principal may report as another role,
    and the REPORT's event records it. ``principal`` None: a trusted in-process caller.
    """
    parsed = parse_report_request(request)
    tenant = validate_tenant(tenant)
    acting = acting_for(principal, parsed.reporter, "reporter")
    for _ in range(MAX_TRIES):
        try:
            with services.store.transaction() as connection:
                task = _load(connection, parsed.task_id, tenant)
                return write_report_in(
                    connection, services, task, parsed, attempt_id=None, acting=acting
                )
        except DuplicateKey as error:
            if error.table not in {"reports", "unknown"}:
                raise
            log.info("write_report on %s lost a race; deciding again", parsed.task_id)
    raise Conflict(
        f"write_report on {parsed.task_id} kept colliding with concurrent REPORTs; retry the "
        "same call (it is safe: a duplicate is returned, not written twice)",
        task_id=parsed.task_id,
    )


def _load(connection: Connection, task_id: str, tenant: str) -> Task:
    task = tasks.get(connection, task_id, tenant=tenant)
    if task is None:
        raise TaskNotFound(f"no {task_id} in tenant {tenant!r}; `surehand tasks` lists them")
    return task


def write_report_in(
    connection: Connection,
    services: Services,
    task: Task,
    request: ReportRequest,
    *,
    attempt_id: str | None,
    locked: bool = False,
    acting: Mapping[str, Any] | None = None,
) -> WriteReportResult:
    """The write_report decision inside the caller's transaction (which it never commits).

    The TASK row is re-read under a row lock so that concurrent REPORTs on one TASK take
    turns and every check below sees the TASK as it is now, not as the caller read it
    (``locked``: the caller read ``task`` under that lock in this transaction already).
    ``acting``: who reported for ``reporter`` (an ADMIN principal), recorded in its event.
    """
    current = _locked_current(connection, task, request, locked)
    recipient = _check_route(current, request)
    digest = body_hash(request.body)
    existing = report_rows.find_duplicate(
        connection,
        task_id=current.task_id,
        reporter=request.reporter,
        recipient=recipient,
        status=request.status,
        submission_id=request.client_submission_id,
        rework_round=current.rework_round,
        body_hash=digest,
    )
    if existing is not None:
        return WriteReportResult(existing, deduplicated=True)
    _check_bucket(current)
    report = _new_revision(connection, services, current, request, recipient, digest, attempt_id)
    _record(connection, current, report, acting)
    return WriteReportResult(report, deduplicated=False)


def _locked_current(
    connection: Connection, task: Task, request: ReportRequest, locked: bool
) -> Task:
    """Check the request fits ``task``, then re-read the TASK under its row lock (unless the
    caller already did, in this transaction)."""
    if request.task_id != task.task_id:
        raise ValidationFailed("task_id", f"is {request.task_id}, but the TASK is {task.task_id}")
    if not request.body.strip():
        raise ValidationFailed("body", "must not be blank")
    if locked:
        return task
    current = tasks.get_for_update(connection, task.task_id)
    if current is None:
        raise TaskNotFound(f"{task.task_id} no longer exists")
    return current


def _check_route(task: Task, request: ReportRequest) -> str:
    """The REPORT's recipient: the task's sender, who is the only one it may go to."""
    sender, driver = task.fields.sender, task.fields.recipient
    if request.reporter != driver:
        raise ReportRejected(
            f"only {driver}, the recipient of {task.task_id}, may report on it, not "
            f"{request.reporter}",
            reason="reporter_mismatch",
        )
    if request.recipient is not None and request.recipient != sender:
        raise ReportRejected(
            f"a REPORT on {task.task_id} goes to its sender {sender}, not {request.recipient}; "
            "omit recipient to default to the sender",
            reason="report_recipient_mismatch",
        )
    return sender


def _check_bucket(task: Task) -> None:
    # Checked after the dedupe lookup on purpose: a retried REPORT whose first copy landed
    # before the TASK moved on (e.g. to review) still gets its first result back.
    if task.bucket is not Bucket.ACTIVE:
        raise ReportRejected(
            f"{task.task_id} is in {task.bucket.value}; a REPORT can only be written while the "
            "TASK is active",
            reason="task_state_disallows_report",
            bucket=task.bucket.value,
        )


def _new_revision(
    connection: Connection,
    services: Services,
    task: Task,
    request: ReportRequest,
    recipient: str,
    digest: str,
    attempt_id: str | None,
) -> Report:
    """Insert the next revision of the series, superseding its latest."""
    previous = report_rows.latest(
        connection,
        task_id=task.task_id,
        reporter=request.reporter,
        recipient=recipient,
        status=request.status,
    )
    now = services.clock.now()
    day = utc_day(now)
    seq, number = counters.allocate(connection, "REPORT", day)
    report = new_report(
        task,
        request,
        report_id=report_id(day, number),
        recipient=recipient,
        digest=digest,
        attempt_id=attempt_id,
        now=now,
        previous=previous,
    )
    report_rows.insert(connection, report, task.tenant, seq)
    return report


def report_id(day: str, number: int) -> str:
    """``REPORT-YYYYMMDD-NNN``: the day (UTC) and its counter's number."""
    return f"REPORT-{day}-{number:03d}"


def new_report(
    task: Task,
    request: ReportRequest,
    *,
    report_id: str,
    recipient: str,
    digest: str,
    attempt_id: str | None,
    now: datetime,
    previous: Report | None,
) -> Report:
    """The next revision of a series whose latest is ``previous`` (None: the first)."""
    return Report(
        report_id=report_id,
        task_id=task.task_id,
        reporter=request.reporter,
        recipient=recipient,
        status=request.status,
        body=request.body,
        body_hash=digest,
        client_submission_id=request.client_submission_id,
        rework_round=task.rework_round,
        revision=previous.revision + 1 if previous is not None else 1,
        supersedes=previous.report_id if previous is not None else None,
        attempt_id=attempt_id,
        created_at=now,
    )


def _record(
    connection: Connection, task: Task, report: Report, acting: Mapping[str, Any] | None
) -> None:
    """The REPORT event in the TASK's history (not a move: no bucket, no revision bump)."""
    events.insert(connection, report_event(report, acting))


def report_event(report: Report, acting: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The row of a REPORT's event (``acting``: an ADMIN principal who wrote it)."""
    return events.row(
        task_id=report.task_id,
        kind=EventKind.REPORT,
        by=report.reporter,
        at=report.created_at,
        attempt_id=report.attempt_id,
        data={
            "report_id": report.report_id,
            "status": report.status.value,
            "revision": report.revision,
            "rework_round": report.rework_round,
            "supersedes": report.supersedes,
            **(acting or {}),
        },
    )


def report_body(result: Any) -> str:
    """The REPORT body made from an agent's return value."""
    if result is None:
        return "(the agent returned no result)"
    if isinstance(result, str):
        return result if result.strip() else "(the agent returned an empty result)"
    return json.dumps(jsonable(result), ensure_ascii=False, indent=2, sort_keys=True)


def jsonable(value: Any) -> Any:
    """``value`` if every store keeps it alike as JSON, else its (bounded) ``repr``: an agent's
    result or an effect's value is recorded whatever it is (NaN, NUL in a string, an object
    JSON cannot hold), and never makes a write that one database takes and another refuses."""
    try:
        return check_json(value, limit=MAX_VALUE_BYTES)
    except ValueError:
        return repr(value)[:MAX_VALUE_BYTES]
