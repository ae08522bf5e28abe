"""The real Claude Code (pinned, against the model double) runs ``git push`` through Bash in
its TASK's clone and its worker is SIGKILLed mid-command: the hooks journaled the call as a
``git.push`` intent (remote, ref and the commit the worker read), and the successor's
admission asks the built-in probe. After the push reached the remote: reconciled, no person,
no hold. Before it did: a successor Claude pushes. The remote shows one update either way."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import Admission, Bucket, EffectFact
from surehand.store import Store
from tests.agent_clis import AgentClis
from tests.git_remotes import git
from tests.model_doubles import AnthropicDouble, Exchange, Final, Script, Step, StepFor, serving
from tests.procs import RedisServer, running, start_worker, wait_until
from tests.session_helpers import operations_of
from tests.shared.agent_clis import REPORT, bash, claude_env, settled_by, submitted

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def the_clone(root: Path) -> Path:
    """The TASK's clone the worker made (``worktree:``): one TASK, one clone."""
    [clone] = [path for path in root.rglob(".worktrees/*") if (path / ".git").is_dir()]
    return clone


def origin_of(workspace: Path, hook: str, script: str) -> Path:
    """A bare ``origin.git`` beside ``workspace`` that logs every ref update and runs
    ``script`` as its ``hook``; the workspace, its remote ``origin``, has one commit."""
    origin = workspace.parent / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    git(origin, "config", "core.logAllRefUpdates", "always")
    path = origin / "hooks" / hook
    path.write_text(f"#!/bin/sh\n{script}")
    path.chmod(0o755)
    git(workspace, "remote", "add", "origin", origin.as_uri())
    git(workspace, "add", "README")
    git(workspace, "commit", "-qm", "first")
    return origin


def test_a_claude_push_killed_mid_command_after_it_landed_is_confirmed_by_the_probe(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    landed = tmp_path / "landed"
    # The ref is updated; the push has not returned.
    origin = origin_of(workspace, "post-receive", f"touch {landed}\nsleep 20\n")

    def push(_exchange: Exchange) -> Step:
        return bash(f"git -C {the_clone(tmp_path / 'sessions')} push origin HEAD")

    steps: list[StepFor] = [push, Final(REPORT)]
    with serving(AnthropicDouble(Script(steps))) as model:
        env = claude_env(store, broker, tmp_path, clis, model, sandbox="none")
        env["SUREHAND_AGENT_WORKSPACE"] = f"worktree:{workspace}"
        doomed = start_worker(env, tmp_path / "worker1.log")
        with running(doomed):
            task_id = submitted(reconciling_client)
            wait_until(landed.exists, timeout=180, interval=0.2, what="the push to land")
            doomed.kill()  # SIGKILL, mid-command: Claude's Bash call has not returned
        [journaled] = operations_of(store, task_id)
        with running(start_worker(env, tmp_path / "worker2.log")) as successor:
            settled_by(reconciling_client, store, task_id, successor, or_held=True)

    task = reconciling_client.get_task(task_id)
    assert (task.bucket, task.hold) == (Bucket.REVIEW, None)
    [case] = reconciling_client.cases(task_id=task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert case.decided_by == "reconciler"
    [asked] = case.effect_refs["probes"]
    assert (asked["probe"], asked["answer"]) == ("git.push@1", "present")
    branch = journaled.probe_args["ref"] if journaled.probe_args else ""
    assert journaled.name == "claude:Bash"
    assert journaled.probe == "git.push"
    assert branch.startswith("refs/heads/surehand/")
    assert asked["saw"]["remote_ref"] == journaled.probe_args["commit"]  # type: ignore[index]
    log = origin / "logs" / branch
    assert len(log.read_text().splitlines()) == 1  # one update: nothing pushed it again
    assert len(reconciling_client.attempts(task_id)) == 1


def test_a_claude_push_killed_before_it_landed_is_run_again_by_a_successor_once(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    arrived = tmp_path / "arrived"
    # The first push waits here, its ref not updated.
    waits = f"if [ ! -e {arrived} ]; then touch {arrived}; sleep 20; exit 1; fi\n"
    origin = origin_of(workspace, "pre-receive", waits)

    def push(_exchange: Exchange) -> Step:
        return bash(f"git -C {the_clone(tmp_path / 'sessions')} push origin HEAD")

    steps: list[StepFor] = [push, Final(REPORT)]  # each attempt plays it from the start
    with serving(AnthropicDouble(Script(steps))) as model:
        env = claude_env(store, broker, tmp_path, clis, model, sandbox="none")
        env["SUREHAND_AGENT_WORKSPACE"] = f"worktree:{workspace}"
        doomed = start_worker(env, tmp_path / "worker1.log")
        with running(doomed):
            task_id = submitted(reconciling_client)
            wait_until(arrived.exists, timeout=180, interval=0.2, what="the push to arrive")
            doomed.kill()  # SIGKILL, mid-command: the remote has not taken the push
        with running(start_worker(env, tmp_path / "worker2.log")) as successor:
            settled_by(reconciling_client, store, task_id, successor, or_held=True)

    task = reconciling_client.get_task(task_id)
    assert (task.bucket, task.hold) == (Bucket.REVIEW, None)
    [case] = reconciling_client.cases(task_id=task_id)
    assert case.admission is Admission.REEXECUTE
    [asked] = case.effect_refs["probes"]
    assert (asked["probe"], asked["answer"]) == ("git.push@1", "absent")
    first, again = operations_of(store, task_id)
    assert (first.probe, again.probe) == ("git.push", "git.push")
    assert first.outcome is not None
    assert first.outcome["probe"] == "absent"
    branch = str((again.probe_args or {})["ref"])
    log = origin / "logs" / branch
    assert len(log.read_text().splitlines()) == 1  # pushed once, by the successor
    assert len(reconciling_client.attempts(task_id)) == 2
