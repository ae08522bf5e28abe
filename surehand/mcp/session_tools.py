"""The tools of the session MCP server: an LLM agent declares its own effects and reports.

Every tool acts as the one attempt its bearer token was granted to (:class:`Grant`) and goes
through the same fenced service calls as ``ctx.operation`` and ``ctx.report``
(:func:`surehand.dispatcher.operations.declare_operation` and ``settle_operation``,
``Session.report``): a call from an attempt that no longer owns its TASK is refused with a
``stale_owner`` error and leaves a ``stale_owner_fenced`` event (one per attempt), and a session
that lost its lease refuses every call (``lease_lost``). Either answer also ends the session:
its token is revoked (every later request is refused with that reason) and its program is
stopped (:meth:`Grant.stop`, which the command agent turns into stopping its process group),
so a refused agent neither keeps running nor keeps calling. Refusals are tool errors carrying
the problem document of the other doors (``{"error": {...}}``, also as the result's text),
whose ``detail`` says what to do next. Each session has a budget
(:mod:`surehand.mcp.session_state`): a call past one of its limits is refused with
``session_limit`` before anything is written, and the session goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from surehand.agents.briefing import brief_for
from surehand.agents.claude_hook import HookPolicy
from surehand.dispatcher.delegation import wait_for
from surehand.dispatcher.operations import Declared
from surehand.dispatcher.sessions import Session
from surehand.doors import problem
from surehand.errors import AuthError, LeaseLost, StaleOwner, SurehandError
from surehand.mcp.server import error_result
from surehand.mcp.session_answers import begin, delegated, end_effect, fence, size_of
from surehand.mcp.session_state import HookCalls, Kind, SessionBudget
from surehand.model import ReportStatus

INSTRUCTIONS = """\
surehand runs this session and records what it does, so that if the session is interrupted a
successor neither repeats an effect that happened nor guesses. Before EVERY side effect outside
this directory (a pull request, a message, a ticket, a deploy, a payment, a write to another
system): call effect_begin(name, args). If it answers already_done, the effect already happened
in an earlier attempt: do NOT do it again, use its recorded outcome. Otherwise do the effect,
then call effect_end(operation_id, outcome, receipt) with the external id it produced. To hand
work to another role, call delegate(recipient, subject, body, key): it creates the child TASK
once, whichever attempt asks; wait_for(children) ends this session until they are done. Call
recovery_brief() first: it lists what earlier attempts of this TASK already did and the
children they delegated, with their REPORTs.
"""


EffectName = Annotated[
    str,
    Field(min_length=1, max_length=255, description="What the effect does: github.open_pr."),
]
EffectArgs = Annotated[
    dict[str, Any],
    Field(
        description="What makes this effect this one (repository, title, recipient...): "
        "the same name and args are the same effect."
    ),
]
IdempotencyKey = Annotated[
    str | None, Field(max_length=255, description="A key the far side deduplicates on.")
]
Policy = Annotated[
    Literal["none", "keyed"],
    Field(description="keyed: a successor may repeat an interrupted effect with the same key."),
]
ProbeName = Annotated[
    str | None,
    Field(description="A probe registered in the workers that tells whether it happened."),
]
ProbeArgs = Annotated[
    dict[str, Any] | None,
    Field(
        description="What the probe looks at, e.g. for git.push {remote, ref, commit}; for "
        "http.request {url, status, field, equals}; for github.pull_request {repo, head}."
    ),
]
Receipt = Annotated[
    str | None,
    Field(max_length=2000, description="The external id it produced (PR URL, message id...)."),
]


@dataclass(frozen=True)
class Grant:
    """One session's right to the tools: its token, its attempt, and whether it still runs."""

    token: str
    url: str
    session: Session
    cancelled: Callable[[], bool]
    # Stops the session's program (code, why): the command agent stops its process group.
    stop: Callable[[str, str], None] = lambda _code, _why: None
    hooks: HookPolicy | None = None  # Claude Code's hooks: what they decide (None: no hooks)
    budget: SessionBudget = field(default_factory=SessionBudget)
    calls: HookCalls = field(default_factory=HookCalls)

    @property
    def task_id(self) -> str:
        return self.session.task_id


GrantLookup = Callable[[str | None], Grant | None]
# Revokes a token, remembering why (told to whoever presents it again).
GrantRevoke = Callable[[str, str], None]


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = (header or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class SessionTools:
    """The tool bodies; ``lookup`` finds the grant of a bearer token (None once revoked)."""

    def __init__(self, lookup: GrantLookup, revoke: GrantRevoke | None = None) -> None:
        self.lookup = lookup
        self.revoke = revoke or (lambda _token, _why: None)

    def grant(self, ctx: Context | None) -> Grant:
        headers = ctx.headers if ctx is not None else None
        found = self.lookup(bearer(headers.get("authorization")) if headers else None)
        if found is None:
            raise AuthError(
                "this session's MCP token is unknown or its attempt has ended; only the "
                "session that was given SUREHAND_MCP_TOKEN may use it, while it runs"
            )
        return found

    def call(
        self,
        ctx: Context | None,
        body: Callable[[Grant], dict[str, Any]],
        spend: tuple[Kind, Any] = ("call", None),
    ) -> CallToolResult:
        """Run ``body`` as the caller's grant, once its budget allows ``spend`` (the kind of
        call, and what it asks to store); typed errors become problem tool errors, and a
        ``stale_owner`` or ``lease_lost`` answer ends the session (:meth:`end`)."""
        try:
            grant = self.grant(ctx)
        except SurehandError as exc:
            return error_result(problem.for_error(exc))
        try:
            if grant.cancelled():
                raise _lease_lost(grant)
            grant.budget.spend(spend[0], size_of(spend[1]))
            return _ok(body(grant))
        except (StaleOwner, LeaseLost) as refused:
            self.end(grant, refused)
            return error_result(problem.for_error(refused))
        except SurehandError as exc:
            return error_result(problem.for_error(exc))

    def end(self, grant: Grant, refused: StaleOwner | LeaseLost) -> None:
        """The session can record nothing more: revoke its token and stop its program."""
        code = "stale_owner" if isinstance(refused, StaleOwner) else "lease_lost"
        why = (
            f"attempt {grant.session.attempt.number} of {grant.task_id} was refused "
            f"({code}: {refused.message}); its token is revoked and its program stopped"
        )
        self.revoke(grant.token, why)
        grant.stop(code, why)

    def effect_begin(
        self,
        name: EffectName,
        args: EffectArgs,
        idempotency_key: IdempotencyKey = None,
        retry_policy: Policy = "none",
        probe: ProbeName = None,
        probe_args: ProbeArgs = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Declare an effect BEFORE doing it. Returns {status: "begun", operation_id}: do the
        effect, then call effect_end. Or {status: "already_done", outcome, receipt}: it already
        happened for this TASK; do NOT do it again."""
        return self.call(
            ctx,
            lambda grant: begin(
                grant.session,
                Declared.of(name, args, idempotency_key, retry_policy, probe, probe_args),
            ),
            ("operation", [name, args, idempotency_key, probe, probe_args]),
        )

    def effect_end(
        self,
        operation_id: Annotated[int, Field(description="The id effect_begin returned.")],
        outcome: Literal["succeeded", "failed"],
        receipt: Receipt = None,
        value: Annotated[Any, Field(description="Any JSON result worth recording.")] = None,
        error: Annotated[str | None, Field(max_length=4000, description="Why it failed.")] = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Record the outcome of an effect you began. "failed" means it may still have
        happened: it is not repeated unless it was begun with retry_policy "keyed" and a key."""
        return self.call(
            ctx,
            lambda grant: end_effect(grant.session, operation_id, outcome, receipt, value, error),
            ("call", [receipt, value, error]),
        )

    def report(
        self,
        body: Annotated[str, Field(description="The REPORT (Markdown).")],
        status: Literal["done", "in_progress", "blocked", "aborted"] = "done",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Write a REPORT on this TASK now (your final answer also becomes the REPORT)."""
        return self.call(
            ctx,
            lambda grant: grant.session.report(body, ReportStatus(status), None).to_dict(),
            ("report", body),
        )

    def progress(
        self,
        note: Annotated[str, Field(min_length=1, description="What you have done so far.")],
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Record a progress note (an in_progress REPORT; an identical note is written once)."""
        return self.call(
            ctx,
            lambda grant: grant.session.report(note, ReportStatus.IN_PROGRESS, None).to_dict(),
            ("report", note),
        )

    def delegate(
        self,
        recipient: Annotated[str, Field(description="The role that does it: DEV, QA, OPS...")],
        subject: Annotated[str, Field(min_length=1, description="The child TASK's subject.")],
        body: Annotated[str, Field(description="What to do (Markdown).")] = "",
        key: Annotated[
            str | None,
            Field(
                max_length=128,
                description="Your name for this child (dev, qa-1...): the same key from any "
                "attempt of this TASK finds the same child. Without one, the request itself is "
                "the key.",
            ),
        ] = None,
        depends_on: Annotated[
            list[str],
            Field(
                max_length=256,
                description="task_ids of children of this TASK that must be done first.",
            ),
        ] = [],  # noqa: B006  (pydantic copies defaults; the tool schema shows [])
        priority: Literal["P0", "P1", "P2", "P3"] = "P2",
        risk_level: Literal["low", "medium", "high", "irreversible"] = "medium",
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Create a child TASK for another role, ONCE: answered {disposition: "created" |
        "reused", task_id}. "reused" means it exists already (an earlier attempt created it):
        do not create it another way. "conflict" means this key was used for another request.
        recovery_brief() lists the children already delegated."""
        arguments = {
            "recipient": recipient,
            "subject": subject,
            "body": body,
            "key": key,
            "depends_on": depends_on,
            "priority": priority,
            "risk_level": risk_level,
        }
        return self.call(
            ctx,
            lambda grant: delegated(grant.session, arguments),
            ("delegate", arguments),
        )

    def wait_for(
        self,
        children: Annotated[
            list[str],
            Field(
                max_length=256,
                description="task_ids of children of this TASK to wait for (none: all).",
            ),
        ] = [],  # noqa: B006  (pydantic copies defaults; the tool schema shows [])
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Wait for child TASKs without holding a worker. "ready": they are all done, go on.
        "waiting": this session ENDS now (stop working); the TASK runs again in a new session
        once they are done, and recovery_brief() then lists their REPORTs."""
        return self.call(ctx, lambda grant: self._waited(grant, children))

    def _waited(self, grant: Grant, children: list[str]) -> dict[str, Any]:
        answer = wait_for(grant.session, children)
        if answer["status"] == "waiting":
            why = f"{grant.task_id} waits for {', '.join(answer['children'])}"
            self.revoke(grant.token, f"this session ended: {why}")
            grant.stop("waiting", why)
        return answer

    def recovery_brief(self, ctx: Context | None = None) -> CallToolResult:
        """What earlier, interrupted attempts of this TASK declared and what is recorded as done
        (with receipts): never repeat an effect listed as done or confirmed_present."""
        return self.call(ctx, _brief)


def _lease_lost(grant: Grant) -> LeaseLost:
    return LeaseLost(
        f"the session of {grant.task_id} lost its lease: stop working, record nothing more; a "
        "successor will be briefed from the records",
        task_id=grant.task_id,
    )


def _ok(data: dict[str, Any]) -> CallToolResult:
    text = json.dumps(data, ensure_ascii=False, default=str)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _brief(grant: Grant) -> dict[str, Any]:
    fence(grant.session, "recovery_brief")
    session = grant.session
    return brief_for(session.services.store, session.task_id, session.attempt).to_dict()
