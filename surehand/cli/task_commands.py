"""``surehand submit | report | move | tasks | show | diagnose``: the task commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from surehand.cli.app import app
from surehand.cli.common import (
    EXIT_CONFLICT,
    EXIT_RETRY,
    EXIT_TIMEOUT,
    DatabaseUrl,
    JsonFlag,
    Tenant,
    console,
    emit_json,
    err_console,
    handle_errors,
    open_existing,
)

# The rest -- the runtime, the records, the rich renderings (surehand.cli.render) -- is imported
# by the commands that use it: CLI start-up time (tests/doors/test_cli_startup.py).
if TYPE_CHECKING:
    from surehand.cli.watch import WatchSpec
    from surehand.facade import Surehand
    from surehand.model import Bucket, Task


def _open(database_url: str | None, tenant: str | None) -> Surehand:
    from surehand.facade import Surehand

    return Surehand(database_url=database_url, tenant=tenant)


def _body(body: str | None, body_file: Path | None) -> str:
    if body_file is None:
        return body or ""
    if str(body_file) == "-":
        return sys.stdin.read()
    return body_file.read_text(encoding="utf-8")


@app.command()
@handle_errors
def submit(
    sender: Annotated[str, typer.Option(envvar="SUREHAND_SENDER", help="Sender role, e.g. PM.")],
    recipient: Annotated[str, typer.Option(envvar="SUREHAND_RECIPIENT", help="Recipient role.")],
    subject: Annotated[str, typer.Option(envvar="SUREHAND_SUBJECT", help="One-line subject.")],
    body: Annotated[str | None, typer.Option(envvar="SUREHAND_BODY", help="TASK body.")] = None,
    body_file: Annotated[
        Path | None,
        typer.Option(envvar="SUREHAND_BODY_FILE", help="Read the body from a file ('-': stdin)."),
    ] = None,
    submission_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            "--client-submission-id",
            envvar="SUREHAND_SUBMISSION_ID",
            help="Stable id of this submission: reuse it on every retry.",
        ),
    ] = None,
    priority: Annotated[
        str, typer.Option(envvar="SUREHAND_PRIORITY", help="P0-P3 or urgent/high/normal/low.")
    ] = "P2",
    thread_key: Annotated[
        str, typer.Option(envvar="SUREHAND_THREAD_KEY", help="Groups related TASKs (free text).")
    ] = "",
    parent: Annotated[str, typer.Option(envvar="SUREHAND_PARENT", help="Parent TASK id.")] = "",
    reference: Annotated[
        list[str] | None, typer.Option(envvar="SUREHAND_REFERENCES", help="Repeatable.")
    ] = None,
    depends_on: Annotated[
        list[str] | None, typer.Option(envvar="SUREHAND_DEPENDS_ON", help="Repeatable TASK id.")
    ] = None,
    risk_level: Annotated[
        str, typer.Option(envvar="SUREHAND_RISK_LEVEL", help="low|medium|high|irreversible.")
    ] = "medium",
    time_limit: Annotated[
        int | None,
        typer.Option(
            envvar="SUREHAND_TIME_LIMIT",
            help="Seconds an attempt may run before it is stopped (default: the role's).",
        ),
    ] = None,
    budget_usd: Annotated[
        float | None,
        typer.Option(
            envvar="SUREHAND_BUDGET_USD",
            help="What its LLM agent may spend across attempts (USD); default: its role's.",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a TASK (write_task). With --id, retries return the first result (reused)."""
    request: dict[str, Any] = {
        "sender": sender,
        "recipient": recipient,
        "subject": subject,
        "body": _body(body, body_file),
        "priority": priority,
        "thread_key": thread_key,
        "parent": parent,
        "references": reference or [],
        "depends_on": depends_on or [],
        "risk_level": risk_level,
        "client_submission_id": submission_id,
        **({"budget_usd": budget_usd} if budget_usd is not None else {}),
    }
    if time_limit is not None:  # in the request (and its digest) only when given
        request["time_limit_seconds"] = time_limit
    from surehand.model import ConflictCode, Disposition

    result = _open(database_url, tenant).write_task(request)
    if as_json:
        emit_json(result.to_dict())
    else:
        from surehand.cli.render import result_table

        console.print(result_table(result))
    if result.disposition is Disposition.CONFLICT:
        assert result.conflict is not None
        retry = result.conflict.code is ConflictCode.IN_PROGRESS
        raise typer.Exit(EXIT_RETRY if retry else EXIT_CONFLICT)


@app.command()
@handle_errors
def report(
    task_id: Annotated[str, typer.Argument(help="TASK id.")],
    reporter: Annotated[str, typer.Option(envvar="SUREHAND_REPORTER", help="Reporter role.")],
    body: Annotated[str | None, typer.Option(envvar="SUREHAND_BODY", help="REPORT body.")] = None,
    body_file: Annotated[
        Path | None,
        typer.Option(envvar="SUREHAND_BODY_FILE", help="Read the body from a file ('-': stdin)."),
    ] = None,
    status: Annotated[
        str, typer.Option(envvar="SUREHAND_REPORT_STATUS", help="done|in_progress|blocked|aborted.")
    ] = "done",
    submission_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            envvar="SUREHAND_SUBMISSION_ID",
            help="Stable id of this REPORT: reuse it on every retry.",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Write a REPORT on a TASK (write_report); an identical one is deduplicated."""
    result = _open(database_url, tenant).write_report(
        task_id=task_id,
        reporter=reporter,
        body=_body(body, body_file),
        status=status,
        client_submission_id=submission_id,
    )
    if as_json:
        emit_json(result.to_dict())
        return
    from surehand.cli.render import reports_table

    console.print(reports_table([result.report]))
    if result.deduplicated:
        console.print("[yellow]deduplicated[/]: an identical REPORT exists; nothing was written")


@app.command()
@handle_errors
def move(
    task_id: Annotated[str, typer.Argument(help="TASK id.")],
    action: Annotated[
        str,
        typer.Argument(help="claim|submit|finish|approve|reject|archive|reopen."),
    ],
    actor: Annotated[str, typer.Option(envvar="SUREHAND_ACTOR", help="Acting role, e.g. PM.")],
    reason: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_REASON",
            help="Why, recorded in the history (reject, archive and reopen need one).",
        ),
    ] = None,
    report_id: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_REPORT_ID",
            help="The REPORT submit or finish cites (default: the latest).",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Move a TASK between buckets by a lifecycle action."""
    task = _open(database_url, tenant).transition(
        task_id, action, actor=actor, reason=reason, report_id=report_id
    )
    if as_json:
        emit_json(task.to_dict())
    else:
        from surehand.cli.render import task_table

        console.print(task_table(task))


@app.command("tasks")
@handle_errors
def list_tasks(
    bucket: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_BUCKET", help="Only this bucket: inbox|active|review|done|archive."
        ),
    ] = None,
    recipient: Annotated[
        str | None, typer.Option(envvar="SUREHAND_RECIPIENT", help="Only TASKs sent to this role.")
    ] = None,
    limit: Annotated[
        int,
        typer.Option(envvar="SUREHAND_LIMIT", min=1, max=1000, help="At most this many (1-1000)."),
    ] = 50,
    watch: Annotated[
        bool, typer.Option("--watch", envvar="SUREHAND_WATCH", help="Refresh until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option(envvar="SUREHAND_WATCH_INTERVAL", min=0.05, help="Seconds.")
    ] = 1.0,
    task: Annotated[
        str | None,
        typer.Option("--task", envvar="SUREHAND_WATCH_TASK", help="TASK id for --until-bucket."),
    ] = None,
    until_bucket: Annotated[
        str | None,
        typer.Option(
            envvar="SUREHAND_UNTIL_BUCKET",
            help="With --watch --task: exit 0 once the TASK is in this bucket (e.g. review,done).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(envvar="SUREHAND_WATCH_TIMEOUT", help="Give up after this many seconds."),
    ] = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """List TASKs, newest first; --watch keeps the table live."""
    if watch or until_bucket:
        from surehand.cli.watch import WatchSpec

        _watch(
            open_existing(database_url, tenant),
            WatchSpec(bucket, recipient, limit, interval, _buckets(until_bucket), task, timeout),
            as_json=as_json,
        )
        return
    sh = open_existing(database_url, tenant)
    found = sh.list_tasks(bucket=bucket, recipient=recipient, limit=limit)
    if as_json:
        emit_json([task.to_dict() for task in found])
    else:
        from surehand.cli.render import tasks_table

        console.print(tasks_table(found, _notes(sh, found)))
        for paused in sh.paused_roles():
            why = f": {paused.reason}" if paused.reason else ""
            console.print(f"[yellow]paused[/]: role {paused.role} (by {paused.paused_by}{why})")


def _notes(sh: Surehand, found: list[Task]) -> dict[str, str]:
    """Dispatch notes by task_id: undispatchable TASKs, and TASKs unclaimed for long."""
    from surehand.dispatcher import dispatch

    notes = {task.task_id: dispatch.waiting_note(sh.services, task) for task in found}
    return {task_id: note for task_id, note in notes.items() if note}


def _buckets(text: str | None) -> frozenset[Bucket]:
    from surehand.cli.watch import parse_buckets

    try:
        return parse_buckets(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--until-bucket") from None


def _watch(sh: Surehand, spec: WatchSpec, *, as_json: bool) -> None:
    from surehand.cli.watch import watch as watch_tasks

    if spec.until and not spec.task_id:
        raise typer.BadParameter("--until-bucket needs --task TASK-…", param_hint="--task")
    if spec.task_id:
        sh.get_task(spec.task_id)  # a typo should fail now, not after the timeout
    code = watch_tasks(sh, spec, as_json=as_json)
    if code == EXIT_TIMEOUT:
        err_console.print(f"[red]timed out[/] after {spec.timeout:g} s waiting for {spec.task_id}")
    raise typer.Exit(code)


@app.command()
@handle_errors
def show(
    task_id: Annotated[
        str | None, typer.Argument(help="TASK id; omit it with --id.", show_default=False)
    ] = None,
    submission_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            "--client-submission-id",
            envvar="SUREHAND_SUBMISSION_ID",
            help="Show the TASK this submission created (the --id given to submit).",
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a whole TASK: its fields and body, history, REPORTs (the latest in full),
    attempts, operations and interruption cases, and its tree of children with buckets and
    holds. Long text wraps; nothing is cut."""
    from surehand.dispatcher import dispatch, task_tree

    if (task_id is None) == (submission_id is None):
        raise typer.BadParameter("give a TASK id or --id SUBMISSION_ID (one of them)")
    sh = open_existing(database_url, tenant)
    if task_id is None:
        task_id = sh.diagnose_submission(submission_id or "").task_id
    task = sh.get_task(task_id)
    history = sh.history(task_id)
    found_reports = sh.reports(task_id)
    found_attempts = sh.attempts(task_id)
    found_operations = sh.operations(task_id)
    found_cases = sh.cases(task_id=task_id, limit=1000)
    note = dispatch.waiting_note(sh.services, task)
    descendants = sh.children_tree(task_id)
    if as_json:
        emit_json(
            {
                "task": task.to_dict(),
                "dispatch_note": note,
                "children": [node.to_dict() for node in descendants],
                "held_children": task_tree.held_lines(descendants),
                "history": [event.to_dict() for event in history],
                "reports": [item.to_dict() for item in found_reports],
                "attempts": [item.to_dict() for item in found_attempts],
                "operations": [item.to_dict() for item in found_operations],
                "cases": [item.to_dict() for item in found_cases],
            }
        )
        return
    from surehand.cli import render

    console.print(render.task_view(task, note, task_tree.held_lines(descendants)))
    if descendants:
        console.print(render.children_table(descendants))
    console.print(render.history_table(history))
    if found_reports:
        console.print(render.reports_table(found_reports))
        console.print(render.report_view(found_reports[-1]))  # the latest, in full
    if found_attempts:
        console.print(render.attempts_table(found_attempts))
        for panel in render.attempt_outputs(found_attempts):
            console.print(panel)
    if found_operations:
        console.print(render.operations_table(found_operations))
    if found_cases:
        console.print(render.cases_table(found_cases))
        probed = render.probes_table(found_cases)
        if probed is not None:
            console.print(probed)


@app.command()
@handle_errors
def diagnose(
    submission_id: Annotated[str, typer.Argument(help="client_submission_id.")],
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Read-only diagnostics of a submission's receipt (never repairs anything)."""
    found = open_existing(database_url, tenant).diagnose_submission(submission_id)
    if as_json:
        emit_json(found.to_dict())
        return
    from surehand.cli.render import diagnosis_table

    console.print(diagnosis_table(found))
