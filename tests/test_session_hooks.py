"""Claude Code's hooks answered by the session server (over its real HTTP door): every
effectful call is journaled, also inside a declared effect (linked to it, fingerprinted as
itself), no file of the session changes that, and a hook the server cannot answer well is an
error status, which Claude Code (``onFailure: "block"``) turns into a blocked call."""

# ruff: noqa: F811  (test functions take the fixtures imported below)

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx

from surehand.agents.briefing import brief_for
from surehand.agents.claude_hook import HookPolicy
from surehand.agents.presets import hook_url
from surehand.digest import operation_fingerprint
from surehand.dispatcher.sessions import Session
from surehand.facade import Surehand
from surehand.fcop.render import render_recovery
from surehand.mcp.session_server import SessionMcp
from surehand.mcp.session_tools import Grant
from surehand.model import OperationState
from tests.session_helpers import (  # noqa: F401  (harness fixtures)
    Harness,
    claimed,
    committed_task,
    harness,
    operations_of,
)
from tests.test_session_mcp import (  # noqa: F401  (fixtures)
    call,
    context_of,
    mcp,
    sh,
    structured,
)

POLICY = HookPolicy(allowed=("mcp__surehand", "Bash"))
DEPLOY = {"command": "make deploy", "description": "ship it"}


def granted(mcp: SessionMcp, session: Session, hooks: HookPolicy | None = POLICY) -> Grant:
    return mcp.grant(context_of(session), hooks)


def hook(
    grant: Grant, event: str, call_id: str, tool_input: dict[str, Any], **more: Any
) -> httpx.Response:
    """One hook event as Claude Code posts it (its JSON, the session's token)."""
    payload = {
        "hook_event_name": event,
        "tool_name": more.pop("tool", "Bash"),
        "tool_input": tool_input,
        "tool_use_id": call_id,
        "permission_mode": "default",
        **more,
    }
    headers = {"Authorization": f"Bearer {grant.token}"}
    return httpx.post(hook_url(grant.url, event), json=payload, headers=headers, timeout=30)


def decision(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    output = response.json()["hookSpecificOutput"]
    return f"{output['permissionDecision']}: {output['permissionDecisionReason']}"


def test_a_call_is_journaled_before_it_runs_and_settled_from_its_after_event(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    grant = granted(mcp, claimed(sh.services, task_id))

    before = decision(hook(grant, "pre", "toolu_1", DEPLOY))
    [intent] = operations_of(sh.store, task_id)
    after = hook(grant, "post", "toolu_1", DEPLOY, tool_response={"stdout": "deployed"})

    assert before == f"allow: surehand journaled it as operation {intent.operation_id}"
    assert intent.state is OperationState.INTENT
    assert (after.status_code, after.json()) == (200, {})
    [settled] = operations_of(sh.store, task_id)
    assert settled.state is OperationState.SUCCEEDED
    assert "deployed" in settled.outcome["value"]["response"]  # type: ignore[index]


def test_a_failed_call_is_settled_failed_with_its_error(sh: Surehand, mcp: SessionMcp) -> None:
    task_id = committed_task(sh)
    grant = granted(mcp, claimed(sh.services, task_id))

    decision(hook(grant, "pre", "toolu_1", DEPLOY))
    hook(grant, "failure", "toolu_1", DEPLOY, error="Exit code 3\nrefused")

    [failed] = operations_of(sh.store, task_id)
    assert failed.state is OperationState.FAILED
    assert "Exit code 3" in str(failed.error)


def test_a_call_inside_a_decoy_declared_effect_is_journaled_and_linked_to_it(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    grant = granted(mcp, claimed(sh.services, task_id))
    decoy = structured(call(grant, "effect_begin", {"name": "thinking", "args": {}}))

    first = decision(hook(grant, "pre", "toolu_1", DEPLOY))
    hook(grant, "post", "toolu_1", DEPLOY, tool_response={"stdout": ""})
    again = decision(hook(grant, "pre", "toolu_2", DEPLOY))  # the same command once more

    assert first.startswith("allow: surehand journaled it")
    thinking, deploy = operations_of(sh.store, task_id)
    assert thinking.state is OperationState.INTENT  # the decoy is still open
    assert deploy.declared_within == (decoy["operation_id"],)
    # The link is not part of the call's identity: the same call is the same effect.
    assert deploy.fingerprint == operation_fingerprint(deploy.name, deploy.args)
    assert again.startswith("deny: surehand: this call already ran for this TASK")
    # A successor's brief (and TASK.md) says which declared effect the call ran within.
    successor = dataclasses.replace(grant.session.attempt, number=2)
    brief = brief_for(sh.store, task_id, successor).to_dict()
    assert [e["declared_within"] for e in brief["effects"]] == [(), (decoy["operation_id"],)]
    assert f"within operation {decoy['operation_id']})" in render_recovery(brief)


def test_no_file_the_agent_writes_in_its_session_directory_exempts_a_call(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    grant = granted(mcp, claimed(sh.services, task_id))
    state = Path(sh.services.settings.work_dir) / grant.session.attempt.attempt_id
    (state / ".surehand-hooks").mkdir(parents=True)
    (state / ".surehand-hooks" / "declared.json").write_text("[1, 2, 3]")

    assert decision(hook(grant, "pre", "toolu_1", DEPLOY)).startswith("allow: surehand journaled")
    assert [op.name for op in operations_of(sh.store, task_id)] == ["claude:Bash"]


def test_a_forged_event_for_a_journaled_call_id_cannot_swap_the_call(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    grant = granted(mcp, claimed(sh.services, task_id))
    benign = {"command": "echo hello"}

    decision(hook(grant, "pre", "toolu_9", benign))  # the agent races Claude Code's own event
    real = decision(hook(grant, "pre", "toolu_9", DEPLOY))
    same = decision(hook(grant, "pre", "toolu_9", benign))

    assert real == "deny: surehand: call toolu_9 was journaled as another call"
    assert same.startswith("allow: surehand journaled it")
    assert [op.args["input"] for op in operations_of(sh.store, task_id)] == [benign]


def test_calls_the_operator_did_not_permit_are_denied_and_others_pass_unrecorded(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    grant = granted(mcp, claimed(sh.services, task_id), HookPolicy(allowed=("mcp__surehand",)))

    denied = decision(hook(grant, "pre", "toolu_1", DEPLOY))
    read = hook(grant, "pre", "toolu_2", {"file_path": "/etc/hosts"}, tool="Read")

    assert denied.startswith("deny: surehand: Bash is not permitted in this session")
    assert (read.status_code, read.json()) == (200, {})  # Claude Code's own check decides it
    assert operations_of(sh.store, task_id) == []


def test_a_hook_of_an_ended_session_or_without_hooks_is_an_error_status_so_it_blocks(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    session = claimed(sh.services, task_id)
    hookless, grant = granted(mcp, session, hooks=None), granted(mcp, session)
    mcp.revoke(grant)

    assert hook(hookless, "pre", "toolu_1", DEPLOY).status_code == 404
    assert hook(grant, "pre", "toolu_1", DEPLOY).status_code == 401
    garbage = httpx.post(
        hook_url(hookless.url, "pre"),
        content=b"not json",
        headers={"Authorization": f"Bearer {hookless.token}"},
    )
    assert garbage.status_code == 400
    assert operations_of(sh.store, task_id) == []


def test_a_stale_attempts_call_is_denied_and_its_session_stopped(
    sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(sh)
    session = claimed(sh.services, task_id)
    stopped: list[str] = []
    ctx = context_of(session)
    ctx.stop = lambda code, why: stopped.append(code)  # type: ignore[method-assign]
    grant = mcp.grant(ctx, POLICY)
    session.fail(RuntimeError("the agent raised"))  # attempt 1 no longer owns the TASK

    denied = decision(hook(grant, "pre", "toolu_1", DEPLOY))

    assert denied.startswith("deny: surehand could not journal this call")
    assert stopped == ["stale_owner"]
    assert operations_of(sh.store, task_id) == []
