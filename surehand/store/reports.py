"""REPORT rows: inserted once, never updated; a new revision supersedes, never overwrites.

The dedupe rule (CodeFlowMu ``write_report``) is enforced twice: by :func:`find_duplicate`,
which the dispatcher asks first, and by the unique constraints in ``schema.reports``, which
catch the race between two callers that both asked before either wrote. An INSERT refused by
a constraint surfaces as ``DuplicateKey`` when the caller's transaction ends.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, select
from sqlalchemy import insert as sql_insert

from surehand.model import Report, ReportStatus
from surehand.store.schema import reports

# Writing order: the time, then the day's counter value behind the (permuted) number. REPORTs
# numbered before migration 0009 have no counter value but sequential numbers, in which a
# longer number is a later one (REPORT-...-1000 follows REPORT-...-999).
_CHRONOLOGICAL = (
    reports.c.created_at,
    func.coalesce(reports.c.seq, 0),
    func.length(reports.c.report_id),
    reports.c.report_id,
)


def _report(row: Row[Any]) -> Report:
    return Report(
        report_id=row.report_id,
        task_id=row.task_id,
        reporter=row.reporter,
        recipient=row.recipient,
        status=ReportStatus(row.status),
        body=row.body,
        body_hash=row.body_hash,
        client_submission_id=row.client_submission_id,
        rework_round=row.rework_round,
        revision=row.revision,
        supersedes=row.supersedes,
        attempt_id=row.attempt_id,
        created_at=row.created_at,
    )


# Hot-path statements: built once, executed with parameters (compiled once, then cached).
_INSERT = sql_insert(reports)
_SERIES = (
    reports.c.task_id == bindparam("task_id"),
    reports.c.reporter == bindparam("reporter"),
    reports.c.recipient == bindparam("recipient"),
    reports.c.status == bindparam("status"),
)
_BY_SUBMISSION = (
    select(reports)
    .where(*_SERIES, reports.c.client_submission_id == bindparam("submission_id"))
    .order_by(reports.c.revision)
    .limit(1)
)
_BY_CONTENT = (
    select(reports)
    .where(
        *_SERIES,
        reports.c.rework_round == bindparam("rework_round"),
        reports.c.body_hash == bindparam("body_hash"),
    )
    .order_by(reports.c.revision)
    .limit(1)
)
_LATEST = select(reports).where(*_SERIES).order_by(reports.c.revision.desc()).limit(1)
_GET = select(reports).where(reports.c.report_id == bindparam("report_id"))


def insert(connection: Connection, report: Report, tenant: str, seq: int | None) -> None:
    """Insert one REPORT inside the caller's transaction (DuplicateKey on a dedupe-key clash);
    ``seq``: the counter value its number was allocated from."""
    connection.execute(_INSERT, row(report, tenant, seq))


def row(report: Report, tenant: str, seq: int | None) -> dict[str, Any]:
    """The row of one REPORT (``seq``: the counter value behind its number)."""
    return {
        "report_id": report.report_id,
        "task_id": report.task_id,
        "tenant": tenant,
        "reporter": report.reporter,
        "recipient": report.recipient,
        "status": report.status.value,
        "body": report.body,
        "body_hash": report.body_hash,
        "client_submission_id": report.client_submission_id,
        "rework_round": report.rework_round,
        "revision": report.revision,
        "supersedes": report.supersedes,
        "attempt_id": report.attempt_id,
        "created_at": report.created_at,
        "seq": seq,
    }


def _series(task_id: str, reporter: str, recipient: str, status: ReportStatus) -> dict[str, Any]:
    """The parameters naming one series of revisions: same task, route and status."""
    return {
        "task_id": task_id,
        "reporter": reporter,
        "recipient": recipient,
        "status": status.value,
    }


def _one(connection: Connection, statement: Any, params: dict[str, Any]) -> Report | None:
    row = connection.execute(statement, params).one_or_none()
    return _report(row) if row is not None else None


def find_duplicate(
    connection: Connection,
    *,
    task_id: str,
    reporter: str,
    recipient: str,
    status: ReportStatus,
    submission_id: str | None,
    rework_round: int,
    body_hash: str,
) -> Report | None:
    """The REPORT a new one would duplicate: same series and either the same non-empty
    submission id or the same rework round and body hash. A submission-id match wins, since
    it names the caller's own earlier attempt."""
    series = _series(task_id, reporter, recipient, status)
    if submission_id:
        match = _one(connection, _BY_SUBMISSION, {**series, "submission_id": submission_id})
        if match is not None:
            return match
    return _one(
        connection, _BY_CONTENT, {**series, "rework_round": rework_round, "body_hash": body_hash}
    )


def latest(
    connection: Connection, *, task_id: str, reporter: str, recipient: str, status: ReportStatus
) -> Report | None:
    """The highest revision of one series, which the next revision supersedes."""
    return _one(connection, _LATEST, _series(task_id, reporter, recipient, status))


def latest_for_task(connection: Connection, task_id: str) -> Report | None:
    """The newest REPORT on a TASK in any series (what ``submit`` cites when none is named)."""
    row = connection.execute(
        select(reports)
        .where(reports.c.task_id == task_id)
        .order_by(*(column.desc() for column in _CHRONOLOGICAL))
        .limit(1)
    ).one_or_none()
    return _report(row) if row is not None else None


def for_task(connection: Connection, task_id: str) -> list[Report]:
    """Every REPORT on a TASK, oldest first."""
    rows = connection.execute(
        select(reports).where(reports.c.task_id == task_id).order_by(*_CHRONOLOGICAL)
    ).all()
    return [_report(row) for row in rows]


def get(connection: Connection, report_id: str) -> Report | None:
    return _one(connection, _GET, {"report_id": report_id})


def count(connection: Connection, task_id: str | None = None) -> int:
    query = select(func.count()).select_from(reports)
    if task_id is not None:
        query = query.where(reports.c.task_id == task_id)
    return int(connection.execute(query).scalar_one())
