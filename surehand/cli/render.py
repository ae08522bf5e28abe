"""Rich renderings of records for humans (``--json`` prints the records' dicts instead)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.markup import escape
from rich.table import Table

from surehand.model import (
    Attempt,
    InterruptionCase,
    Operation,
    Report,
    SubmissionDiagnosis,
    Task,
    TaskEvent,
    WriteTaskResult,
)

BUCKET_STYLE = {
    "inbox": "cyan",
    "active": "yellow",
    "review": "magenta",
    "done": "green",
    "archive": "dim",
}


def bucket_label(task: Task) -> str:
    label = f"[{BUCKET_STYLE[task.bucket.value]}]{task.bucket.value}[/]"
    return f"{label} [bold red]HELD[/]" if task.hold else label


def result_table(result: WriteTaskResult) -> Table:
    table = Table(show_header=False, box=None)
    for key, value in result.to_dict().items():
        if key == "conflict" and value:
            value = f"[red]{value['code']}[/]: {value['message']}"
        table.add_row(f"[bold]{key}[/]", str(value))
    return table


def tasks_table(tasks: Sequence[Task], notes: Mapping[str, str] | None = None) -> Table:
    """TASKs as rows; ``notes`` (task_id -> text) adds a dispatch column when any is given:
    undispatchable TASKs, and TASKs no worker has claimed for long (dispatch.waiting_note)."""
    table = Table(title=f"{len(tasks)} TASK(s)")
    for column in ("task_id", "bucket", "sender→recipient", "P", "attempt", "subject"):
        table.add_column(column)
    if notes:
        table.add_column("dispatch")
    for task in tasks:
        row = [
            task.task_id,
            bucket_label(task),
            f"{task.fields.sender}→{task.fields.recipient}",
            task.fields.priority.value,
            str(task.epoch or "-"),
            task.fields.subject[:60],
        ]
        if notes:
            row.append(_note(notes.get(task.task_id)))
        table.add_row(*row)
    return table


def _note(note: str | None) -> str:
    if not note:
        return ""
    style = "bold red" if note.startswith("undispatchable") else "yellow"
    return f"[{style}]{escape(note)}[/]"


def task_table(task: Task, note: str | None = None) -> Table:
    table = Table(show_header=False, box=None, title=task.task_id)
    for key, value in task.to_dict().items():
        if key == "body":
            continue
        table.add_row(f"[bold]{key}[/]", str(value))
    if task.hold:
        table.add_row("[bold red]hold[/]", f"case {task.hold.case_id}: {task.hold.reason}")
    if note:
        table.add_row("[bold]dispatch[/]", _note(note))
    return table


def history_table(history: Sequence[TaskEvent]) -> Table:
    table = Table(title="history")
    for column in ("at", "kind", "action", "from→to", "by", "reason / data"):
        table.add_column(column)
    for event in history:
        moves = f"{event.from_bucket or '-'}→{event.to_bucket or '-'}" if event.to_bucket else ""
        detail = event.reason or (str(dict(event.data)) if event.data else "")
        table.add_row(
            event.at.strftime("%H:%M:%S.%f")[:-3],
            event.kind.value,
            event.action or "",
            moves,
            event.by,
            detail[:80],
        )
    return table


def reports_table(reports: Sequence[Report]) -> Table:
    table = Table(title="reports")
    for column in ("report_id", "rev", "status", "reporter→recipient", "body"):
        table.add_column(column)
    for report in reports:
        table.add_row(
            report.report_id,
            str(report.revision),
            report.status.value,
            f"{report.reporter}→{report.recipient}",
            report.body.splitlines()[0][:60] if report.body else "",
        )
    return table


def diagnosis_table(diagnosis: SubmissionDiagnosis) -> Table:
    table = Table(show_header=False, box=None, title=diagnosis.client_submission_id)
    for key, value in diagnosis.to_dict().items():
        style = "bold red" if key == "stalled" and value else "bold"
        table.add_row(f"[{style}]{key}[/]", str(value))
    return table


def cases_table(found: Sequence[InterruptionCase]) -> Table:
    table = Table(title="interruption cases")
    for column in ("case_id", "task_id", "epoch", "effect", "admission", "state", "successor"):
        table.add_column(column)
    for case in found:
        admission = case.admission.value if case.admission else "pending"
        style = "bold red" if admission == "hold_for_review" else "bold"
        table.add_row(
            case.case_id,
            case.task_id,
            str(case.interrupted_epoch),
            case.effect_fact.value if case.effect_fact else "-",
            f"[{style}]{admission}[/]",
            case.state.value,
            (case.successor_attempt_id or "-")[:12],
        )
    return table


def attempts_table(found: Sequence[Attempt]) -> Table:
    table = Table(title="attempts")
    for column in ("#", "state", "worker", "returned", "started", "error"):
        table.add_column(column)
    for attempt in found:
        table.add_row(
            str(attempt.number),
            attempt.state.value,
            attempt.worker[:40],
            "yes" if attempt.agent_returned else "no",
            attempt.started_at.strftime("%H:%M:%S"),
            (attempt.error or "")[:60],
        )
    return table


def operations_table(found: Sequence[Operation]) -> Table:
    table = Table(title="operations (effect facts)")
    for column in ("id", "epoch", "name", "state", "key", "receipt"):
        table.add_column(column)
    for op in found:
        table.add_row(
            str(op.operation_id),
            str(op.epoch),
            op.name,
            op.state.value,
            op.idempotency_key or "-",
            (op.external_receipt or "-")[:40],
        )
    return table
