"""Claude Code's hooks answered by the session server (over its real HTTP door): every
effectful call is journaled, also inside a declared effect (linked to it, fingerprinted as
itself), no file of the session changes that, and a hook the server cannot answer well is an
error status, which Claude Code (``onFailure: "block"``) turns into a blocked call."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx

from surehand.agents.briefing import brief_for
from surehand.agents.claude_hook import HookPolicy
from surehand.agents.presets import hook_url
from surehand.digest import operation_fingerprint
from surehand.facade import Surehand
from surehand.fcop.render import render_recovery
from surehand.mcp.session_server import SessionMcp
from surehand.model import OperationState
from tests.session_helpers import claimed, committed_task, operations_of
from tests.shared.session_hooks import DEPLOY, POLICY, decision, granted, hook
from tests.shared.session_mcp import call, context_of, structured


def test_a_call_is_journaled_before_it_runs_and_settled_from_its_after_event(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant = granted(mcp, claimed(harness_sh.services, task_id))

    before = decision(hook(grant, "pre", "toolu_1", DEPLOY))
    [intent] = operations_of(harness_sh.store, task_id)
    after = hook(grant, "post", "toolu_1", DEPLOY, tool_response={"stdout": "deployed"})

    assert before == f"allow: surehand journaled it as operation {intent.operation_id}"
    assert intent.state is OperationState.INTENT
    assert (after.status_code, after.json()) == (200, {})
    [settled] = operations_of(harness_sh.store, task_id)
    assert settled.state is OperationState.SUCCEEDED
    assert "deployed" in settled.outcome["value"]["response"]  # type: ignore[index]


def test_a_failed_call_is_settled_failed_with_its_error(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant = granted(mcp, claimed(harness_sh.services, task_id))

    decision(hook(grant, "pre", "toolu_1", DEPLOY))
    hook(grant, "failure", "toolu_1", DEPLOY, error="Exit code 3\nrefused")

    [failed] = operations_of(harness_sh.store, task_id)
    assert failed.state is OperationState.FAILED
    assert "Exit code 3" in str(failed.error)


def test_a_call_inside_a_decoy_declared_effect_is_journaled_and_linked_to_it(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant = granted(mcp, claimed(harness_sh.services, task_id))
    decoy = structured(call(grant, "effect_begin", {"name": "thinking", "args": {}}))

    first = decision(hook(grant, "pre", "toolu_1", DEPLOY))
    hook(grant, "post", "toolu_1", DEPLOY, tool_response={"stdout": ""})
    again = decision(hook(grant, "pre", "toolu_2", DEPLOY))  # the same command once more

    assert first.startswith("allow: surehand journaled it")
    thinking, deploy = operations_of(harness_sh.store, task_id)
    assert thinking.state is OperationState.INTENT  # the decoy is still open
    assert deploy.declared_within == (decoy["operation_id"],)
    # The link is not part of the call's identity: the same call is the same effect.
    assert deploy.fingerprint == operation_fingerprint(deploy.name, deploy.args)
    assert again.startswith("deny: surehand: this call already ran for this TASK")
    # A successor's brief (and TASK.md) says which declared effect the call ran within.
    successor = dataclasses.replace(grant.session.attempt, number=2)
    brief = brief_for(harness_sh.store, task_id, successor).to_dict()
    assert [e["declared_within"] for e in brief["effects"]] == [(), (decoy["operation_id"],)]
    assert f"within operation {decoy['operation_id']})" in render_recovery(brief)


def test_no_file_the_agent_writes_in_its_session_directory_exempts_a_call(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant = granted(mcp, claimed(harness_sh.services, task_id))
    state = Path(harness_sh.services.settings.work_dir) / grant.session.attempt.attempt_id
    (state / ".surehand-hooks").mkdir(parents=True)
    (state / ".surehand-hooks" / "declared.json").write_text("[1, 2, 3]")

    assert decision(hook(grant, "pre", "toolu_1", DEPLOY)).startswith("allow: surehand journaled")
    assert [op.name for op in operations_of(harness_sh.store, task_id)] == ["claude:Bash"]


def test_a_forged_event_for_a_journaled_call_id_cannot_swap_the_call(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant = granted(mcp, claimed(harness_sh.services, task_id))
    benign = {"command": "echo hello"}

    decision(hook(grant, "pre", "toolu_9", benign))  # the agent races Claude Code's own event
    real = decision(hook(grant, "pre", "toolu_9", DEPLOY))
    same = decision(hook(grant, "pre", "toolu_9", benign))

    assert real == "deny: surehand: call toolu_9 was journaled as another call"
    assert same.startswith("allow: surehand journaled it")
    assert [op.args["input"] for op in operations_of(harness_sh.store, task_id)] == [benign]


def test_calls_the_operator_did_not_permit_are_denied_and_others_pass_unrecorded(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant = granted(
        mcp, claimed(harness_sh.services, task_id), HookPolicy(allowed=("mcp__surehand",))
    )

    denied = decision(hook(grant, "pre", "toolu_1", DEPLOY))
    read = hook(grant, "pre", "toolu_2", {"file_path": "/etc/hosts"}, tool="Read")

    assert denied.startswith("deny: surehand: Bash is not permitted in this session")
    assert (read.status_code, read.json()) == (200, {})  # Claude Code's own check decides it
    assert operations_of(harness_sh.store, task_id) == []


def test_a_hook_of_an_ended_session_or_without_hooks_is_an_error_status_so_it_blocks(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    session = claimed(harness_sh.services, task_id)
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
    assert operations_of(harness_sh.store, task_id) == []


def test_a_stale_attempts_call_is_denied_and_its_session_stopped(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    session = claimed(harness_sh.services, task_id)
    stopped: list[str] = []
    ctx = context_of(session)
    ctx.stop = lambda code, why: stopped.append(code)  # type: ignore[method-assign]
    grant = mcp.grant(ctx, POLICY)
    session.fail(RuntimeError("the agent raised"))  # attempt 1 no longer owns the TASK

    denied = decision(hook(grant, "pre", "toolu_1", DEPLOY))

    assert denied.startswith("deny: surehand could not journal this call")
    assert stopped == ["stale_owner"]
    assert operations_of(harness_sh.store, task_id) == []
