"""A real deployment (``surehand worker`` and ``beat`` processes, Postgres, a private
redis-server) whose agent pushes to a real git remote over ``file://`` or a local ``git
daemon``, with the built-in git.push probe and no probe setting anywhere. The first worker is
SIGKILLed inside the push's operation: after the push reached the remote (its outcome never
recorded) or before it ran. A second worker's reconciler decides: reconciled with no hold, or
run again -- and the remote's ref was updated exactly once either way."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import Admission, Bucket, EffectFact
from tests.deployment import Deployment
from tests.git_remotes import Remote, git, git_daemon, make_remote
from tests.push_agents import REMOTE_ENV, WORK_ENV
from tests.shared.probes_processes import decided, killed_then_succeeded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.parametrize("store", ["postgres"], indirect=True),
]


@pytest.fixture
def daemon_remote(tmp_path: Path) -> Remote:
    made = make_remote(tmp_path / "git")
    git(made.bare, "config", "core.logAllRefUpdates", "always")
    git(made.bare, "config", "daemon.receivepack", "true")
    made.commit("base")
    made.push()
    return made


def updates(daemon_remote: Remote, task_id: str) -> int:
    log = daemon_remote.bare / "logs" / "refs" / "heads" / task_id
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.parametrize("transport", ["file", "git-daemon"])
@pytest.mark.parametrize(
    ("crash_at", "admission", "attempts"),
    [
        ("operation.after_effect", Admission.RECONCILE_ONLY, 1),
        ("operation.after_intent", Admission.REEXECUTE, 2),
    ],
    ids=["pushed-then-killed", "killed-before-push"],
)
def test_an_interrupted_push_is_decided_by_the_built_in_probe_and_happens_once(
    probes_deployment: Deployment,
    daemon_remote: Remote,
    transport: str,
    crash_at: str,
    admission: Admission,
    attempts: int,
) -> None:
    with ExitStack() as stack:
        url = daemon_remote.url
        if transport == "git-daemon":
            url = f"{stack.enter_context(git_daemon(daemon_remote.bare.parent))}/remote.git"
            # The agent's remote is on the worker's loopback: only an entry naming it admits it.
            probes_deployment.env["SUREHAND_PROBE_EGRESS"] = url.removeprefix("git://").split("/")[
                0
            ]
        probes_deployment.env.update(
            {"SUREHAND_AGENTS": "DEV=tests.push_agents:push", WORK_ENV: str(daemon_remote.work),
             REMOTE_ENV: url}
        )  # fmt: skip
        sh = Surehand(database_url=probes_deployment.store.url)  # no probe here; runs no admission
        doomed = probes_deployment.worker(SUREHAND_CRASH_AT=crash_at)
        task_id = killed_then_succeeded(probes_deployment, sh, doomed, "Push", "Push the work.")

        case = decided(sh, task_id, probes_deployment)

        assert case.admission is admission
        assert case.effect_fact is not EffectFact.UNKNOWN
        [asked] = case.effect_refs["probes"]
        assert asked["probe"] == "git.push@1"
        assert asked["answer"] == ("present" if attempts == 1 else "absent")
        probes_deployment.wait(lambda: sh.get_task(task_id).bucket is Bucket.REVIEW, "the REPORT")
        assert sh.get_task(task_id).hold is None
        assert updates(daemon_remote, task_id) == 1  # the remote saw one push, never two
        assert len(sh.attempts(task_id)) == attempts
        sh.close()


def test_many_pushes_under_worker_kills_need_no_person_and_each_happens_once(
    probes_deployment: Deployment, daemon_remote: Remote
) -> None:
    """Chaos: six TASKs push; two workers die at their first push (one after it landed, one
    before it ran), killing whatever else they were running mid-session; a clean worker then
    takes over. Holds that need a person: 0; every TASK's ref updated exactly once."""
    probes_deployment.env.update(
        {"SUREHAND_AGENTS": "DEV=tests.push_agents:push", WORK_ENV: str(daemon_remote.work),
         REMOTE_ENV: daemon_remote.url,
         # A dead worker's prefetched messages are lost (early ack): published again soon.
         "SUREHAND_REPUBLISH_AFTER_SECONDS": "5"}
    )  # fmt: skip
    sh = Surehand(database_url=probes_deployment.store.url)
    doomed = [
        probes_deployment.worker(SUREHAND_CRASH_AT="operation.after_effect"),
        probes_deployment.worker(SUREHAND_CRASH_AT="operation.after_intent"),
    ]
    probes_deployment.beat()
    task_ids = [
        str(sh.write_task(sender="PM", recipient="DEV", subject=f"Push {n}", body="Push.").task_id)
        for n in range(6)
    ]
    probes_deployment.wait(
        lambda: all(p.returncode is not None for p in doomed), "both workers to die"
    )
    probes_deployment.worker()

    def all_reviewed() -> bool:
        return all(sh.get_task(task_id).bucket is Bucket.REVIEW for task_id in task_ids)

    probes_deployment.wait(all_reviewed, "every TASK's REPORT", timeout=120)
    assert [sh.get_task(task_id).hold for task_id in task_ids] == [None] * 6
    assert [updates(daemon_remote, task_id) for task_id in task_ids] == [1] * 6
    cases = [case for task_id in task_ids for case in sh.cases(task_id=task_id)]
    assert len(cases) >= 2  # each doomed worker's session at least
    assert all(case.admission is not Admission.HOLD_FOR_REVIEW for case in cases)
    sh.close()
