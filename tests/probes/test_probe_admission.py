"""Admission asks the built-in git.push probe about an interrupted push to a real remote,
with no registration and no person: present reconciles, absent re-executes (the successor
pushes once), an unreachable remote holds; what the probe saw is in the case's evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand.agents.context import SessionContext
from surehand.errors import ValidationFailed
from surehand.model import Admission, Bucket, CaseState, EffectFact, OperationState
from tests.git_remotes import Remote, git
from tests.recovery_helpers import Rig
from tests.shared.probe_admission import interrupted_push, push_args


def updates(remote: Remote, ref: str = "refs/heads/feature") -> int:
    """How many times the remote's ref was updated (its reflog)."""
    log = remote.bare / "logs" / ref
    return len(log.read_text().splitlines()) if log.exists() else 0


def pushing_agent(rig: Rig, remote: Remote, commit: str) -> None:
    def agent(ctx: SessionContext) -> str:
        def push() -> str:
            git(remote.work, "push", "-q", "origin", f"{commit}:refs/heads/feature")
            return commit

        ctx.operation(
            "git.push", {"ref": "feature"}, push, probe="git.push",
            probe_args=push_args(remote, commit),
        )  # fmt: skip
        return f"pushed in attempt {ctx.attempt.number}"

    rig.sh.agent("DEV")(agent)


def test_a_push_that_reached_the_remote_is_confirmed_and_reconciled_without_a_hold(
    any_rig: Rig, remote: Remote
) -> None:
    rig = any_rig
    commit = remote.commit("the TASK's work")
    pushing_agent(rig, remote, commit)
    task_id = interrupted_push(rig, remote, commit)
    git(remote.work, "push", "-q", "origin", f"{commit}:refs/heads/feature")  # then killed

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.CONFIRMED, Admission.RECONCILE_ONLY)
    assert case.state is CaseState.RESOLVED
    assert rig.task(task_id).hold is None
    assert rig.task(task_id).bucket is Bucket.REVIEW
    [asked] = case.effect_refs["probes"]
    assert asked["probe"] == "git.push@1"
    assert asked["answer"] == "present"
    assert asked["saw"]["remote_ref"] == commit
    [op] = rig.operations(task_id)
    assert op.state is OperationState.SUCCEEDED
    assert op.outcome is not None
    assert op.outcome["saw"]["remote_ref"] == commit
    assert updates(remote) == 1
    assert len(rig.attempts(task_id)) == 1


def test_a_push_that_never_reached_the_remote_is_run_again_and_pushes_once(
    any_rig: Rig, remote: Remote
) -> None:
    rig = any_rig
    commit = remote.commit("the TASK's work")
    pushing_agent(rig, remote, commit)
    task_id = interrupted_push(rig, remote, commit)  # killed before the push

    case = rig.lose(task_id)

    assert case.admission is Admission.REEXECUTE
    assert case.effect_refs["probes"][0]["answer"] == "absent"
    assert case.effect_refs["probes"][0]["saw"]["remote_ref"] == "(absent)"
    assert rig.sh.run_session(task_id).outcome == "settled"
    assert updates(remote) == 1
    assert remote.head("feature") == commit


def test_an_unreachable_remote_holds_the_task_naming_what_the_probe_saw(
    any_rig: Rig, remote: Remote, tmp_path: Path
) -> None:
    rig = any_rig
    commit = remote.commit("the TASK's work")
    pushing_agent(rig, remote, commit)
    task_id = interrupted_push(rig, remote, commit, url=(tmp_path / "gone.git").as_uri())

    case = rig.lose(task_id)

    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert case.effect_refs["why"] == "probe 'git.push' was inconclusive"
    assert case.effect_refs["probes"][0]["answer"] == "inconclusive"
    assert "did not answer" in case.effect_refs["probes"][0]["saw"]["why"]
    assert rig.task(task_id).hold is not None
    assert updates(remote) == 0


def test_a_declaration_with_bad_probe_args_is_refused_naming_the_field(any_rig: Rig) -> None:
    rig = any_rig
    ran: list[int] = []

    def agent(ctx: SessionContext) -> str:
        with pytest.raises(ValidationFailed) as refused:
            ctx.operation(
                "git.push", {}, lambda: ran.append(1), probe="git.push",
                probe_args={"remote": "ext::sh -c id", "ref": "main", "commit": "0" * 40},
            )  # fmt: skip
        assert refused.value.field == "probe_args"
        assert "remote" in refused.value.message
        with pytest.raises(ValidationFailed) as unknown:
            ctx.operation("git.push", {}, lambda: ran.append(1), probe="git.pushed")
        assert unknown.value.field == "probe"
        return "refused"

    rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    assert rig.sh.run_session(task_id).outcome == "settled"
    assert ran == []
    assert rig.operations(task_id) == []
