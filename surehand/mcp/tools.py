"""The MCP tools: ``write_task``, ``write_report``, ``read_task``, ``list_tasks``, ``task_status``,
``cancel_task``, ``release_task``, ``pause_role``, ``resume_role``.

Each tool calls the same facade as the other doors and returns the same records as structured
content (and as JSON text for hosts that only read text). Every failure -- a typed surehand
error, an argument of the wrong type, an argument the tool does not have -- comes back as a
tool error whose structured content is ``{"error": problem}``, the problem document the HTTP API
sends (``type``, ``code``, ``title``, ``detail``, ``status``, ``retryable``, ``field``), so an
agent can tell "fix the field" from "retry later". Unknown arguments are refused, not dropped:
``"tenant": "globex"`` must not quietly act in the caller's own tenant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from surehand import __version__
from surehand.doors import problem
from surehand.doors.auth import Authenticator
from surehand.errors import SurehandError
from surehand.mcp.server import SurehandServer, error_result, result, strict_tool
from surehand.principals import Principal

if TYPE_CHECKING:
    from surehand.facade import Surehand

INSTRUCTIONS = """\
surehand is a task queue for AI-agent work. Enqueue work with write_task; follow it with
task_status or read_task. Every write_task call needs a client_submission_id: make up one id
per piece of work you intend to create (for example "fix-login-bug-2026-01-31") and send the
SAME id again whenever you retry that call, even after a timeout or an error. A retry with the
same id never creates a second TASK; it returns the first result with disposition "reused".
"""

WRITE_TASK = """\
Create a TASK for a role (recipient) to work on, exactly once per client_submission_id.

client_submission_id: generate ONE id per business intent and reuse it on EVERY retry of this
call (after a timeout, a lost response, a restart). Same id + same request returns the first
result with disposition "reused" and creates nothing; same id + a different request returns
disposition "conflict" (code digest_mismatch) and changes nothing. Use a new id only for a
new, different piece of work. Returns the write_task result record (task_id, disposition, ...).
"""

Role = Annotated[str, Field(description="Role code such as PM, DEV, QA or OPS.")]
TaskId = Annotated[str, Field(description="TASK id such as TASK-20260131-001.")]
Bucket = Literal["inbox", "active", "review", "done", "archive"]


class Tools:
    """The tool bodies, bound to a facade per tenant and an authenticator."""

    def __init__(self, sh: Surehand) -> None:
        self.auth = Authenticator(sh.settings)
        self.sh = sh

    def principal(self, ctx: Context | None) -> Principal:
        """The HTTP caller's principal; over stdio (no headers) the local user."""
        headers = ctx.headers if ctx is not None else None
        if headers is None:
            return self.auth.local
        return self.auth.authenticate(headers.get("authorization"))

    def call(
        self, ctx: Context | None, body: Callable[[Principal, Surehand], Any]
    ) -> CallToolResult:
        """Run ``body`` for the caller's principal and tenant; typed errors become tool errors."""
        try:
            principal = self.principal(ctx)
            return result(body(principal, self.sh.acting_as(principal)))
        except SurehandError as exc:
            return error_result(problem.for_error(exc))

    def write_task(
        self,
        sender: Role,
        recipient: Role,
        subject: Annotated[str, Field(description="One line, at most 512 characters.")],
        client_submission_id: Annotated[
            str,
            Field(description="One id per intended TASK; reuse it on every retry. [A-Za-z0-9._:-]"),
        ],
        body: Annotated[str, Field(description="What to do (Markdown, at most 1 MiB).")] = "",
        priority: Annotated[str, Field(description="P0-P3 or urgent/high/normal/low.")] = "P2",
        risk_level: Literal["low", "medium", "high", "irreversible"] = "medium",
        thread_key: str = "",
        parent: Annotated[str, Field(description="Parent TASK id, if any.")] = "",
        references: list[str] | None = None,
        depends_on: Annotated[list[str] | None, Field(description="TASK ids.")] = None,
        time_limit_seconds: Annotated[
            int | None,
            Field(description="Seconds an attempt may run before it is stopped (timed_out)."),
        ] = None,
        budget_usd: Annotated[
            float | None,
            Field(description="What its LLM agent may spend across attempts (USD)."),
        ] = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Create a TASK once per client_submission_id (the tool text is ``WRITE_TASK``)."""
        request: dict[str, Any] = {
            "sender": sender,
            "recipient": recipient,
            "subject": subject,
            "body": body,
            "priority": priority,
            "risk_level": risk_level,
            "thread_key": thread_key,
            "parent": parent,
            "references": references or [],
            "depends_on": depends_on or [],
            "client_submission_id": client_submission_id,
            **({"budget_usd": budget_usd} if budget_usd is not None else {}),
        }
        if time_limit_seconds is not None:  # in the request (and its digest) only when given
            request["time_limit_seconds"] = time_limit_seconds
        return self.call(ctx, lambda _p, sh: sh.write_task(request).to_dict())

    def cancel_task(
        self,
        task_id: TaskId,
        reason: Annotated[str, Field(description="Why (required, recorded in the history).")],
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Cancel a TASK you sent (or approve): in inbox it is never run; a running session is
        stopped within seconds; a TASK held for review keeps its hold for its approver.
        Asking again changes nothing."""
        return self.call(ctx, lambda _p, sh: sh.cancel(task_id, reason=reason).to_dict())

    def release_task(self, task_id: TaskId, ctx: Context | None = None) -> CallToolResult:
        """Run anyway a TASK you approve that is held because a dependency was archived or
        cancelled: that dependency is dropped and the TASK runs once its others are done. To
        drop the TASK instead, cancel it."""
        return self.call(ctx, lambda _p, sh: sh.release_hold(task_id).to_dict())

    def pause_role(
        self,
        role: Role,
        reason: Annotated[str, Field(description="Why (recorded with the pause).")] = "",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Pause a role (ADMIN or PM): no session of it starts until resume_role; its TASKs
        wait in inbox; sessions already running go on. Asking again changes nothing."""
        return self.call(ctx, lambda _p, sh: sh.pause_role(role, reason=reason).to_dict())

    def resume_role(self, role: Role, ctx: Context | None = None) -> CallToolResult:
        """Resume a paused role (ADMIN or PM): its TASKs that waited are published again.
        Answers how many wait in inbox."""

        def resume(_p: Principal, sh: Surehand) -> dict[str, Any]:
            return {"role": role, "resumed": True, "waiting": sh.resume_role(role)}

        return self.call(ctx, resume)

    def write_report(
        self,
        task_id: TaskId,
        reporter: Annotated[str, Field(description="Your role: the TASK's recipient.")],
        body: Annotated[str, Field(description="The report (Markdown).")],
        status: Literal["done", "in_progress", "blocked", "aborted"] = "done",
        client_submission_id: Annotated[
            str | None, Field(description="Reuse on retry; an identical REPORT is deduplicated.")
        ] = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Write a REPORT on a TASK. Only the TASK's recipient may report; an identical REPORT
        returns deduplicated: true and writes nothing."""
        return self.call(
            ctx,
            lambda p, sh: sh.write_report(
                task_id=task_id,
                reporter=p.acting_role(reporter),
                body=body,
                status=status,
                client_submission_id=client_submission_id,
            ).to_dict(),
        )

    def read_task(self, task_id: TaskId, ctx: Context | None = None) -> CallToolResult:
        """Read a TASK with its REPORTs and history."""

        def read(_p: Principal, sh: Surehand) -> dict[str, Any]:
            return {
                "task": sh.get_task(task_id).to_dict(),
                "reports": [report.to_dict() for report in sh.reports(task_id)],
                "history": [event.to_dict() for event in sh.history(task_id)],
            }

        return self.call(ctx, read)

    def list_tasks(
        self,
        bucket: Bucket | None = None,
        recipient: Annotated[str | None, Field(description="Only TASKs for this role.")] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
        offset: Annotated[int, Field(ge=0)] = 0,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """List TASKs, newest first, optionally by bucket and recipient."""
        return self.call(
            ctx,
            lambda _p, sh: {
                "tasks": [
                    task.to_dict()
                    for task in sh.list_tasks(
                        bucket=bucket, recipient=recipient, limit=limit, offset=offset
                    )
                ]
            },
        )

    def task_status(self, task_id: TaskId, ctx: Context | None = None) -> CallToolResult:
        """Where a TASK is: bucket, hold, current attempt and its state, latest REPORT."""

        def status(_p: Principal, sh: Surehand) -> dict[str, Any]:
            task = sh.get_task(task_id)
            attempts = sh.attempts(task_id)
            reports = sh.reports(task_id)
            latest = reports[-1] if reports else None
            return {
                "task_id": task.task_id,
                "bucket": task.bucket.value,
                "hold": task.to_dict()["hold"],
                "attempt": attempts[-1].number if attempts else None,
                "attempt_state": attempts[-1].state.value if attempts else None,
                "latest_report": latest.to_dict() if latest else None,
                "cancel": task.to_dict()["cancel"],
                "updated_at": task.updated_at.isoformat(),
            }

        return self.call(ctx, status)


def build_server(sh: Surehand) -> MCPServer[Any]:
    """An MCP server exposing surehand's tools, acting through ``sh``."""
    tools = Tools(sh)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    idempotent = ToolAnnotations(idempotent_hint=True, destructive_hint=False)
    listed = [
        strict_tool(tools.write_task, "write_task", description=WRITE_TASK, annotations=idempotent),
        strict_tool(tools.write_report, "write_report", annotations=idempotent),
        strict_tool(tools.read_task, "read_task", annotations=read_only),
        strict_tool(tools.list_tasks, "list_tasks", annotations=read_only),
        strict_tool(tools.task_status, "task_status", annotations=read_only),
        strict_tool(
            tools.cancel_task,
            "cancel_task",
            annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=True),
        ),
        strict_tool(
            tools.release_task,
            "release_task",
            annotations=ToolAnnotations(idempotent_hint=False, destructive_hint=False),
        ),
        strict_tool(tools.pause_role, "pause_role", annotations=idempotent),
        strict_tool(tools.resume_role, "resume_role", annotations=idempotent),
    ]
    return SurehandServer(
        "surehand",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        tools=listed,
    )
