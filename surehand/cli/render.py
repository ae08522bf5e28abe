"""Rich renderings of records for humans (``--json`` prints the records' dicts instead)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from surehand.cli.tables import Cell, Column, FittedTable
from surehand.doors.labels import operation_label

if TYPE_CHECKING:  # records are rendered, never built, here: no need to import them first
    from surehand.dispatcher.task_tree import Node
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


TASK_COLUMNS = (
    Column("task_id"),
    Column("bucket", rank=1),
    Column("from→to", rank=3),
    Column("P", rank=2),
    Column("attempt", rank=5),
    Column("subject", whole=False),
)
SUBJECT_SHOWN = 60  # characters of a subject a list shows (`surehand show` shows it all)


def tasks_table(tasks: Sequence[Task], notes: Mapping[str, str] | None = None) -> FittedTable:
    """TASKs as rows, fitted to the terminal: ids whole, the subject wrapped, optional
    columns as they fit. ``notes`` (task_id -> text) adds a dispatch column when any is given:
    undispatchable TASKs, and TASKs no worker has claimed for long (dispatch.waiting_note)."""
    columns = [*TASK_COLUMNS, *([Column("dispatch", whole=False, rank=4)] if notes else [])]
    rows = []
    for task in tasks:
        subject = task.fields.subject
        if len(subject) > SUBJECT_SHOWN:
            subject = subject[: SUBJECT_SHOWN - 1] + "…"
        row: list[Cell] = [
            task.task_id,
            bucket_label(task),
            f"{task.fields.sender}→{task.fields.recipient}",
            task.fields.priority.value,
            str(task.epoch or "-"),
            Text(subject),  # literal: a subject may contain "[/x]"
        ]
        if notes:
            row.append(_note(notes.get(task.task_id)))
        rows.append(row)
    return FittedTable(f"{len(tasks)} TASK(s)", columns, rows)


def _note(note: str | None) -> str:
    if not note:
        return ""
    style = "bold red" if note.startswith("undispatchable") else "yellow"
    return f"[{style}]{escape(note)}[/]"


def _plain(value: Any) -> Text:
    """A value as literal text (never markup: a subject may say ``[bold]``), folded, not cut."""
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return Text(shown, overflow="fold")


def task_table(task: Task, note: str | None = None, held: Sequence[str] = ()) -> Table:
    """Every field of the TASK but its body (see :func:`task_view`), values in full;
    ``held``: what it says of its held children ("child TASK-… held: …")."""
    table = Table(show_header=False, box=None, title=task.task_id)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in task.to_dict().items():
        if key != "body":
            table.add_row(f"[bold]{key}[/]", _plain(value))
    if task.hold:
        table.add_row("[bold red]hold[/]", _plain(_hold_text(task)))
    if note:
        table.add_row("[bold]dispatch[/]", _note(note))
    for line in held:
        table.add_row("[bold red]child held[/]", _plain(line))
    return table


def _hold_text(task: Task) -> str:
    assert task.hold is not None
    if task.hold.dependency is not None:
        return f"dependency {task.hold.dependency}: {task.hold.reason}"
    return f"case {task.hold.case_id}: {task.hold.reason}"


def task_view(task: Task, note: str | None = None, held: Sequence[str] = ()) -> RenderableType:
    """The whole TASK: its fields, then its body in full (wrapped to the terminal)."""
    if not task.fields.body:
        return task_table(task, note, held)
    return Group(task_table(task, note, held), Panel(_plain(task.fields.body), title="body"))


def children_table(nodes: Sequence[Node]) -> Table:
    """The TASK's tree of children: indented by depth, with bucket and hold."""
    table = Table(title="children")
    table.add_column("TASK", no_wrap=True)
    table.add_column("bucket", no_wrap=True)
    table.add_column("to", no_wrap=True)
    table.add_column("subject / hold", overflow="fold", ratio=1)
    for node in nodes:
        child = node.task
        hold = f"\nHELD: {child.hold.reason}" if child.hold else ""
        table.add_row(
            "  " * (node.depth - 1) + child.task_id,
            bucket_label(child),
            child.fields.recipient,
            _plain(child.fields.subject + hold),
        )
    return table


def history_table(history: Sequence[TaskEvent]) -> Table:
    """The history, oldest first; reason and data in full (wrapped, never cut).

    Kind, action and move share one column so that the reason keeps room on an 80-column
    terminal (six columns left it 11 characters: words were split and moves cut).
    """
    table = Table(title="history")
    table.add_column("at", no_wrap=True)
    table.add_column("event", overflow="fold")
    table.add_column("by", overflow="fold")
    table.add_column("reason / data", overflow="fold", ratio=1)
    for event in history:
        detail = [_plain(part) for part in (event.reason, dict(event.data) or None) if part]
        table.add_row(
            event.at.strftime("%H:%M:%S.%f")[:-3],
            _event_cell(event),
            _plain(f"{event.by} ({event.principal})" if event.principal else event.by),
            Text("\n").join(detail),
        )
    return table


def _event_cell(event: TaskEvent) -> Text:
    """``kind action`` and, when the TASK moved, ``from→to`` on a line of its own."""
    lines = [_plain(" ".join(part for part in (event.kind.value, event.action) if part))]
    if event.to_bucket:
        lines.append(_plain(f"{event.from_bucket or '-'}→{event.to_bucket}"))
    return Text("\n").join(lines)


def reports_table(reports: Sequence[Report]) -> Table:
    """One row per REPORT; the body column shows each body's first line, folded, not cut."""
    table = Table(title="reports")
    for column in ("report_id", "rev", "status", "reporter→recipient"):
        table.add_column(column)
    table.add_column("body", overflow="fold", ratio=1)
    for report in reports:
        table.add_row(
            report.report_id,
            str(report.revision),
            report.status.value,
            _plain(f"{report.reporter}→{report.recipient}"),
            _plain(report.body.splitlines()[0] if report.body else ""),
        )
    return table


def report_view(report: Report) -> Panel:
    """One REPORT in full: who, status, when, and the whole body."""
    title = (
        f"REPORT {report.report_id} rev {report.revision}: {report.reporter}→{report.recipient}, "
        f"{report.status.value}, {report.created_at:%Y-%m-%d %H:%M:%S}"
    )
    return Panel(_plain(report.body or "(empty)"), title=escape(title), title_align="left")


def diagnosis_table(diagnosis: SubmissionDiagnosis) -> Table:
    table = Table(show_header=False, box=None, title=diagnosis.client_submission_id)
    for key, value in diagnosis.to_dict().items():
        table.add_row(f"[bold]{key}[/]", str(value))
    return table


CASE_COLUMNS = (
    Column("case_id"),
    Column("task_id"),
    Column("epoch", rank=4),
    Column("effect", rank=3),
    Column("admission", rank=1),
    Column("state", rank=2),
    Column("successor", rank=5),
)


def cases_table(found: Sequence[InterruptionCase]) -> FittedTable:
    """Interruption cases fitted to the terminal: case and TASK ids whole, then admission,
    state, effect, epoch and the successor attempt as they fit."""
    rows = []
    for case in found:
        admission = case.admission.value if case.admission else "pending"
        style = "bold red" if admission == "hold_for_review" else "bold"
        rows.append(
            [
                case.case_id,
                case.task_id,
                str(case.interrupted_epoch),
                case.effect_fact.value if case.effect_fact else "-",
                f"[{style}]{admission}[/]",
                case.state.value,
                case.successor_attempt_id or "-",
            ]
        )
    return FittedTable("interruption cases", CASE_COLUMNS, rows)


def attempts_table(found: Sequence[Attempt]) -> Table:
    table = Table(title="attempts")
    for column in ("#", "state", "worker", "returned", "started", "usage", "error"):
        table.add_column(column)
    for attempt in found:
        table.add_row(
            str(attempt.number),
            attempt.state.value,
            attempt.worker[:40],
            "yes" if attempt.agent_returned else "no",
            attempt.started_at.strftime("%H:%M:%S"),
            usage_label((attempt.details or {}).get("usage")),
            (attempt.error or "")[:60],
        )
    return table


def usage_label(usage: Any) -> str:
    """Tokens, model and cost of one attempt as the agent CLI reported them ("-": none)."""
    if not isinstance(usage, dict):
        return "-"
    tokens = f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out"
    cost = usage.get("cost_usd")
    model = usage.get("model")
    return " · ".join(
        part for part in (model, tokens, f"${cost:.4f}" if cost is not None else None) if part
    )


def attempt_outputs(found: Sequence[Attempt]) -> list[Panel]:
    """What each attempt that did not succeed printed last (its error's context)."""
    panels = []
    for attempt in found:
        output = (attempt.details or {}).get("output") or {}
        if attempt.state.value == "succeeded" or not any(output.values()):
            continue
        text = "\n".join(
            f"--- {name} ---\n{output[name].rstrip()}"
            for name in ("result", "stdout", "stderr")
            if output.get(name)
        )
        title = f"attempt {attempt.number}: {attempt.error or attempt.state.value}"[:120]
        panels.append(Panel(Text(text), title=title, title_align="left"))
    return panels


def operations_table(found: Sequence[Operation]) -> Table:
    table = Table(title="operations (effect facts)")
    for column in ("id", "epoch", "name", "state", "effect", "key", "receipt"):
        table.add_column(column)
    for op in found:
        table.add_row(
            str(op.operation_id),
            str(op.epoch),
            op.name,
            op.state.value,
            operation_label(op),
            op.idempotency_key or "-",
            (op.external_receipt or "-")[:40],
        )
    return table


def probes_table(found: Sequence[InterruptionCase]) -> Table | None:
    """What each probe admission asked answered, and what it saw (None: no probe asked)."""
    rows = [
        (case.case_id, asked)
        for case in found
        for asked in (case.effect_refs or {}).get("probes", [])
        if isinstance(asked, Mapping)
    ]
    if not rows:
        return None
    table = Table(title="probes asked (what they saw)")
    for column in ("case", "operation", "probe", "answer", "saw"):
        table.add_column(column)
    for case_id, asked in rows:
        saw = asked.get("saw") or {}
        table.add_row(
            case_id,
            str(asked.get("operation_id")),
            str(asked.get("probe")),
            str(asked.get("answer")),
            _plain("; ".join(f"{key}={value}" for key, value in dict(saw).items())),
        )
    return table
