"""Rework keeps its own path: a TASK an approver sends back (reject, reopen) gets a new attempt
on the same task_id, with no interruption case, and its new REPORT is a new revision."""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand import Surehand
from surehand.agents.context import SessionContext
from surehand.dispatcher.dispatch import sweep
from surehand.model import Action, AttemptState, Bucket, EventKind, Task


@pytest.fixture
def dev_agent_sh(tmp_path: Path) -> Surehand:
    instance = Surehand(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    rounds: list[int] = []

    @instance.agent("DEV")
    def dev(ctx: SessionContext) -> str:
        rounds.append(ctx.task.rework_round)
        return f"fixed (round {ctx.task.rework_round})"

    return instance


def _reviewed(dev_agent_sh: Surehand) -> str:
    created = dev_agent_sh.write_task(
        sender="PM", recipient="DEV", subject="Fix login", client_submission_id="fix-login"
    )
    assert created.task_id is not None
    assert dev_agent_sh.run_session(created.task_id).outcome == "settled"
    return created.task_id


def test_a_rejected_task_runs_again_as_a_new_attempt_with_a_new_report_revision(
    dev_agent_sh: Surehand,
) -> None:
    task_id = _reviewed(dev_agent_sh)

    sent_back = dev_agent_sh.transition(
        task_id, Action.REJECT, actor="PM", reason="Safari still fails"
    )
    assert (sent_back.bucket, sent_back.rework_round, sent_back.published) == (
        Bucket.ACTIVE,
        1,
        False,
    )
    outcome = dev_agent_sh.run_session(task_id)

    assert (outcome.outcome, outcome.attempt, outcome.bucket) == ("settled", 2, "review")
    attempts = dev_agent_sh.attempts(task_id)
    assert [a.state for a in attempts] == [AttemptState.SUCCEEDED, AttemptState.SUCCEEDED]
    reports = dev_agent_sh.reports(task_id)
    assert [(r.revision, r.rework_round) for r in reports] == [(1, 0), (2, 1)]
    assert reports[1].supersedes == reports[0].report_id
    assert dev_agent_sh.cases(task_id=task_id) == []  # nothing was interrupted
    started = [e for e in dev_agent_sh.history(task_id) if e.kind is EventKind.ATTEMPT_STARTED]
    assert [e.data["rework_round"] for e in started] == [1]


def test_the_sweep_publishes_a_task_sent_back_for_rework_once(dev_agent_sh: Surehand) -> None:
    task_id = _reviewed(dev_agent_sh)
    published: list[str] = []

    def publisher(task: Task) -> None:
        published.append(task.task_id)

    services = dev_agent_sh.services.__class__(
        store=dev_agent_sh.store,
        settings=dev_agent_sh.settings,
        clock=dev_agent_sh.services.clock,
        publisher=publisher,
    )
    dev_agent_sh.transition(task_id, Action.REJECT, actor="PM", reason="again")

    assert sweep(services) == 1
    assert sweep(services) == 0  # published now: not sent twice
    assert published == [task_id]


def test_a_task_in_active_without_a_settled_attempt_is_not_claimed_as_rework(
    dev_agent_sh: Surehand,
) -> None:
    created = dev_agent_sh.write_task(
        sender="PM", recipient="DEV", subject="Manual", client_submission_id="m"
    )
    assert created.task_id is not None
    dev_agent_sh.transition(created.task_id, Action.CLAIM, actor="DEV")  # a person took it by hand

    assert dev_agent_sh.run_session(created.task_id).outcome == "not_claimed"
    assert dev_agent_sh.attempts(created.task_id) == []
