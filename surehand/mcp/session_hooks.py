"""Claude Code's hooks, answered by the session server: every effectful call journaled.

The claude preset gives Claude Code ``type: "http"`` hooks that post each tool call here,
``POST /tasks/<task_id>/hooks/{pre,post,failure}`` with the session's bearer token (the same
door and grant as its MCP tools, :class:`surehand.mcp.session_server.GrantGate`), with
``onFailure: "block"`` and a timeout: a hook that gets no answer, an error status or a timeout
blocks the call. Nothing runs in the sandbox for a hook (a process there could be killed, and a
killed hook let its call through), and every decision is made here, from the operator's
settings in the grant (:class:`surehand.agents.claude_hook.HookPolicy`), never from a file the
agent can write:

- ``pre`` (``PreToolUse``): the decision of :func:`surehand.agents.claude_hook.decide`. A call
  to journal is recorded as an operation intent (as ``effect_begin`` would, counted in the
  session's budget), linked to the agent's own declared effects open at the time
  (``declared_within``; they no longer exempt it), and allowed; if this TASK already recorded
  the same call as succeeded it is denied with the recorded outcome, and any refusal (an
  unsafe repeat, a stale attempt, a limit) denies it with the reason.
- ``post`` / ``failure`` (``PostToolUse`` / ``PostToolUseFailure``): the call's intent, found
  by its ``tool_use_id``, is settled as succeeded (with the tool's response) or failed.

Which intent a call id was journaled as lives in the grant (:class:`HookCalls`). The agent
holds the same token and can post hook events itself; a forged ``pre`` only adds a record, one
for a call id already journaled is refused unless it is the same call, and a forged ``post``
can settle one of its own calls early but never erase it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio.to_thread

from surehand.agents.claude_hook import HookPolicy, allow, decide, deny, operation_of
from surehand.agents.recognisers import recognise
from surehand.dispatcher import queries
from surehand.dispatcher.operations import Declared
from surehand.doors import problem
from surehand.errors import LeaseLost, StaleOwner, SurehandError, ValidationFailed
from surehand.mcp.session_answers import begin, end_effect, size_of
from surehand.mcp.session_state import Journaled
from surehand.mcp.session_tools import Grant, SessionTools

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
GRANT_KEY = "surehand.grant"  # where GrantGate leaves the request's grant in the ASGI scope
EVENTS = ("pre", "post", "failure")
MAX_RESPONSE = 8000  # the end of a tool's response kept with its outcome
MAX_ERROR = 4000


class SessionHooks:
    """ASGI: one hook event of the session whose grant :class:`GrantGate` found."""

    def __init__(self, tools: SessionTools) -> None:
        self.tools = tools  # ends a session refused as stale, like its tools do

    async def __call__(self, scope: Scope, receive: Any, send: Send) -> None:
        grant: Grant = scope[GRANT_KEY]
        event = scope["path"].rpartition("/")[2]
        if scope.get("method") != "POST" or event not in EVENTS:
            await _answer(send, 404, _problem(404, "not_found", "POST /hooks/pre|post|failure"))
            return
        try:
            payload = json.loads(await _body(receive))
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            await _answer(send, 400, _problem(400, "invalid_request", "a hook's JSON object"))
            return
        status, answer = await anyio.to_thread.run_sync(self.answer, grant, event, payload)
        await _answer(send, status, answer)

    def answer(self, grant: Grant, event: str, payload: dict[str, Any]) -> tuple[int, Any]:
        """The HTTP status and body for one event (any error status blocks the call)."""
        if grant.hooks is None:
            return 404, _problem(404, "not_found", "this session has no hooks")
        try:
            if grant.cancelled():
                raise LeaseLost("the session lost its lease: stop working", task_id=grant.task_id)
            if event == "pre":
                return 200, self.pre(grant, payload)
            return 200, self.post(grant, payload, failed=event == "failure")
        except (StaleOwner, LeaseLost) as refused:
            self.tools.end(grant, refused)
            return _refused(event, refused)
        except SurehandError as error:
            return _refused(event, error)
        except Exception:  # a failure of the journal blocks the call it guards
            log.exception("the %s hook of %s failed", event, grant.task_id)
            return 500, _problem(500, "internal_error", "surehand could not journal this call")

    def pre(self, grant: Grant, payload: dict[str, Any]) -> dict[str, Any]:
        assert grant.hooks is not None
        tool, tool_input = _call(payload)
        mode = str(payload.get("permission_mode", ""))
        decision = decide(grant.hooks, tool, tool_input, mode)
        if decision.action == "pass":
            return {}
        if decision.action == "deny":
            return deny(decision.reason)
        call_id = str(payload.get("tool_use_id") or "")
        if not call_id:
            return deny("surehand: this call has no tool_use_id, so it cannot be journaled")
        name, args = operation_of(tool, tool_input)
        identity = json.dumps([name, args], sort_keys=True, default=str)
        earlier = grant.calls.pending_as(call_id)
        if earlier is not None:  # asked again (or forged): only the same call, once journaled
            if earlier.identity != identity:
                return deny(f"surehand: call {call_id} was journaled as another call")
            return allow(_journaled(earlier.operation_id), decision.updated_input)
        grant.budget.spend("operation", size_of(args))
        declared = _declared(grant.hooks, tool, tool_input, payload, name, args)
        answer = begin(grant.session, declared, within=self._declared(grant))
        if answer["status"] == "already_done":
            return deny(_already_done(answer))
        grant.calls.begun(call_id, Journaled(answer["operation_id"], identity))
        return allow(_journaled(answer["operation_id"]), decision.updated_input)

    def post(self, grant: Grant, payload: dict[str, Any], *, failed: bool) -> dict[str, Any]:
        journaled = grant.calls.ended(str(payload.get("tool_use_id") or ""))
        if journaled is None:
            return {}  # not a call the hooks journaled
        if failed:
            error = str(payload.get("error") or "the tool call failed")[-MAX_ERROR:]
            grant.budget.spend("call", len(error))
            end_effect(grant.session, journaled.operation_id, "failed", None, None, error)
            return {}
        response = json.dumps(payload.get("tool_response"), default=str)[-MAX_RESPONSE:]
        grant.budget.spend("call", len(response))
        value = {"response": response}
        end_effect(grant.session, journaled.operation_id, "succeeded", None, value, None)
        return {}

    @staticmethod
    def _declared(grant: Grant) -> list[int]:
        """The effects the agent declared itself that are open now (a journaled call's link)."""
        session = grant.session
        open_ids = queries.open_operations(session.services, session.attempt.attempt_id)
        return grant.calls.declared(open_ids)


def _declared(
    policy: HookPolicy,
    tool: str,
    tool_input: dict[str, Any],
    payload: dict[str, Any],
    name: str,
    args: dict[str, Any],
) -> Declared:
    """The call's intent: with the probe or key a recognised call carries, else plain."""
    cwd = payload.get("cwd")
    found = recognise(tool, tool_input, cwd if isinstance(cwd, str) else None, policy.clone)
    if found is None:
        return Declared.of(name, args, None, "none", None)
    try:
        return Declared.of(
            name, args, found.idempotency_key, found.retry_policy, found.probe, found.probe_args
        )
    except ValidationFailed:
        log.warning("a recognised %s was not valid as declared; journaled plainly", found.kind)
        return Declared.of(name, args, None, "none", None)


def _call(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, dict):
        raise ValidationFailed("tool_input", "a hook's tool_input is a JSON object")
    return str(payload.get("tool_name", "")), tool_input


def _journaled(operation_id: int) -> str:
    return f"surehand journaled it as operation {operation_id}"


def _already_done(answer: dict[str, Any]) -> str:
    return (
        f"surehand: this call already ran for this TASK (operation {answer.get('operation_id')}, "
        f"attempt {answer.get('attempt')}); it was NOT run again. Its recorded outcome: "
        f"{json.dumps(answer.get('outcome'), default=str)[:2000]}"
    )


def _refused(event: str, error: SurehandError) -> tuple[int, Any]:
    """A refused ``pre`` is a denial the model reads; a refused settle an error status."""
    if event == "pre":
        return 200, deny(f"surehand could not journal this call: {error.message}")
    document = problem.for_error(error)
    return int(document["status"]), document


def _problem(status: int, code: str, detail: str) -> dict[str, Any]:
    return problem.body(status, code, detail)


async def _body(receive: Any) -> bytes:
    """The request body (the door's BodyLimit has bounded it already)."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, data: Any) -> None:
    body = json.dumps(data).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
