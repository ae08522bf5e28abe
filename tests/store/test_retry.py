"""Retry on evidence (issue 32, item 4): a role's retry policy, applied by admission, with an
injected clock (the backoff is respected without sleeping)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.dispatcher.retry import Schedule, overloaded, schedule_for
from surehand.errors import ConfigError
from surehand.facade import Surehand
from surehand.model import (
    Admission,
    Attempt,
    AttemptCause,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
)
from surehand.testing import ManualClock
from tests.session_helpers import (
    Harness,
    attempts_of,
    committed_task,
    events_of,
    failing_with_an_open_intent,
    read_task,
)

Agent = Callable[[SessionContext], Any]


def scripted(failures: list[str]) -> tuple[Agent, list[int]]:
    """An agent that raises each of ``failures`` in turn, then returns."""
    runs: list[int] = []

    def agent(ctx: SessionContext) -> str:
        runs.append(ctx.attempt.number)
        if len(runs) <= len(failures):
            raise RuntimeError(failures[len(runs) - 1])
        return "done after all"

    return agent, runs


def dev(harness: Harness, agent: Agent, **settings: Any) -> Surehand:
    sh = harness.surehand(**settings)
    sh.registry.register("DEV", agent)
    return sh


def open_case(sh: Surehand, task_id: str) -> Any:
    [case] = [c for c in sh.cases(task_id=task_id) if c.state is CaseState.OPEN]
    return case


def wait_of(case: Any, since: datetime) -> float:
    assert case.retry_at is not None
    return float((case.retry_at - since).total_seconds())


def test_a_python_agent_that_fails_twice_then_succeeds_ends_in_review_after_two_retries(
    harness: Harness, clock: ManualClock
) -> None:
    agent, runs = scripted(["connection reset", "connection reset again"])
    sh = dev(harness, agent)
    task_id = committed_task(sh)

    assert sh.run_session(task_id).outcome == "failed"
    failed_at = clock.now()
    sh.reconcile()
    first = open_case(sh, task_id)
    assert first.admission is Admission.REEXECUTE
    assert 5.0 <= wait_of(first, failed_at) <= 10.0  # 10 s, jittered between half and all
    assert first.effect_refs["retry"]["attempt"] == 2
    assert read_task(sh.store, task_id).hold is None

    # Before its backoff the successor cannot be claimed, and the pass publishes nothing.
    assert sh.run_session(task_id).outcome == "not_claimed"
    waiting = sh.reconcile()
    assert waiting.retries_waiting == 1
    assert waiting.republished == 0
    assert waiting.next_due_seconds is not None
    assert waiting.next_due_seconds <= 10.0  # the reconciler's loop wakes when it is due
    clock.set(first.retry_at)
    assert sh.run_session(task_id).outcome == "failed"
    failed_again = clock.now()
    sh.reconcile()
    second = open_case(sh, task_id)
    assert 10.0 <= wait_of(second, failed_again) <= 20.0  # doubled
    clock.set(second.retry_at)

    assert sh.run_session(task_id).bucket == "review"
    assert runs == [1, 2, 3]
    assert read_task(sh.store, task_id).bucket is Bucket.REVIEW
    assert [a.cause for a in attempts_of(sh.store, task_id)] == [
        AttemptCause.AGENT_FAILED,
        AttemptCause.AGENT_FAILED,
        AttemptCause.RETURNED,
    ]


def test_an_agent_that_always_fails_is_held_after_max_attempts_with_every_error(
    harness: Harness, clock: ManualClock
) -> None:
    agent, runs = scripted([f"boom {n}" for n in range(1, 10)])
    sh = dev(harness, agent)
    task_id = committed_task(sh)

    for _ in range(5):
        sh.run_session(task_id)
        sh.reconcile()
        case = open_case(sh, task_id)
        if case.retry_at is not None:
            clock.set(case.retry_at)

    assert runs == [1, 2, 3]
    task = read_task(sh.store, task_id)
    assert task.bucket is Bucket.ACTIVE
    assert task.hold is not None
    assert "gave up after 3 attempts" in task.hold.reason
    for n in (1, 2, 3):
        assert f"attempt {n}: RuntimeError: boom {n}" in task.hold.reason
    case = open_case(sh, task_id)
    assert case.admission is Admission.HOLD_FOR_REVIEW
    assert len(case.effect_refs["retry"]["errors"]) == 3
    [hold] = events_of(sh.store, task_id, EventKind.HOLD)
    assert "gave up after 3 attempts" in (hold.reason or "")


def test_an_approver_who_says_run_again_gets_one_more_attempt(
    harness: Harness, clock: ManualClock
) -> None:
    agent, runs = scripted(["a", "b", "c", "d"])
    sh = dev(harness, agent, retry_max_attempts="2")
    task_id = committed_task(sh)
    for _ in range(3):
        sh.run_session(task_id)
        sh.reconcile()
        case = open_case(sh, task_id)
        if case.retry_at is not None:
            clock.set(case.retry_at)
    assert runs == [1, 2]
    held = open_case(sh, task_id)

    decided = sh.review(held.case_id, effect="absent", note="run it again", actor="PM")

    assert decided.admission is Admission.REEXECUTE
    assert decided.retry_at is None  # the approver's decision: at once
    sh.run_session(task_id)
    sh.reconcile()
    assert runs == [1, 2, 3]
    assert "gave up after 3 attempts" in (read_task(sh.store, task_id).hold or _no()).reason


def _no() -> Any:
    raise AssertionError("not held")


def test_an_agent_that_failed_with_an_open_intent_is_held_and_never_retried(
    harness: Harness,
) -> None:
    runs: list[int] = []

    agent = failing_with_an_open_intent(runs, "529 overloaded")

    sh = dev(harness, agent)
    task_id = committed_task(sh)

    sh.run_session(task_id)
    sh.reconcile()
    sh.reconcile()

    assert runs == [1]
    case = open_case(sh, task_id)
    assert (case.admission, case.retry_at) == (Admission.HOLD_FOR_REVIEW, None)
    assert "retry" not in case.effect_refs
    assert read_task(sh.store, task_id).hold is not None


def test_settled_effects_are_replayed_by_the_retry_not_run_again(
    harness: Harness, clock: ManualClock
) -> None:
    effects: list[int] = []

    def agent(ctx: SessionContext) -> str:
        ctx.operation("open_pr", {"branch": "fix"}, lambda: effects.append(1))
        if ctx.attempt.number == 1:
            raise RuntimeError("the CLI exited 1 on a network blip")
        return "opened PR #1"

    sh = dev(harness, agent)
    task_id = committed_task(sh)
    sh.run_session(task_id)
    sh.reconcile()
    clock.set(open_case(sh, task_id).retry_at)

    assert sh.run_session(task_id).bucket == "review"
    assert effects == [1]


def test_an_overload_backs_off_longer(harness: Harness, clock: ManualClock) -> None:
    agent, _ = scripted(["API Error: 529 {'type':'overloaded_error'}"])
    sh = dev(harness, agent)
    task_id = committed_task(sh)
    sh.run_session(task_id)
    failed_at = clock.now()
    sh.reconcile()

    case = open_case(sh, task_id)
    assert 30.0 <= wait_of(case, failed_at) <= 60.0
    assert case.effect_refs["retry"]["overloaded"] is True


def test_an_agent_whose_effects_are_not_observed_is_held_at_its_first_failure(
    harness: Harness,
) -> None:
    agent, runs = scripted(["exit 1"])
    agent.effects_observed = None  # type: ignore[attr-defined]
    sh = dev(harness, agent)
    task_id = committed_task(sh)
    sh.run_session(task_id)
    sh.reconcile()

    assert runs == [1]
    assert open_case(sh, task_id).admission is Admission.HOLD_FOR_REVIEW
    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.details is None or "observed" not in attempt.details


def test_a_role_the_operator_declares_is_retried_although_not_observed(
    harness: Harness, clock: ManualClock
) -> None:
    agent, runs = scripted(["exit 1"])
    agent.effects_observed = None  # type: ignore[attr-defined]
    sh = dev(harness, agent, retry_declared_roles="DEV", retry_backoff_seconds="DEV=1")
    task_id = committed_task(sh)
    sh.run_session(task_id)
    sh.reconcile()
    case = open_case(sh, task_id)
    assert case.admission is Admission.REEXECUTE
    clock.set(case.retry_at)

    assert sh.run_session(task_id).bucket == "review"
    assert runs == [1, 2]


def test_the_backoff_doubles_up_to_its_cap_with_jitter_between_half_and_all() -> None:
    schedule = Schedule(max_attempts=9, backoff=10.0, cap=600.0, overload_backoff=60.0)

    full = [schedule.delay(n, overloaded=False, jitter=0.999999) for n in range(1, 9)]
    least = [schedule.delay(n, overloaded=False, jitter=0.0) for n in range(1, 9)]

    assert [round(d) for d in full] == [10, 20, 40, 80, 160, 320, 600, 600]
    assert least == [d / 2 for d in [10, 20, 40, 80, 160, 320, 600, 600]]
    assert schedule.delay(1, overloaded=True, jitter=0.0) == 30.0


def test_role_settings_override_the_defaults_and_unobserved_agents_get_one_attempt() -> None:
    settings = Settings(
        retry_max_attempts="5,QA=2",
        retry_backoff_seconds="QA=1",
        retry_backoff_max_seconds="QA=4",
    )

    assert schedule_for(settings, "DEV", effects_observed=True) == Schedule(5, 10.0, 600.0, 60.0)
    assert schedule_for(settings, "QA", effects_observed=True) == Schedule(2, 1.0, 4.0, 60.0)
    assert schedule_for(settings, "QA", effects_observed=False).max_attempts == 1
    assert schedule_for(Settings(), "DEV", effects_observed=True).max_attempts == 3


@pytest.mark.parametrize("bad", ["DEV=many", "-1", "DEV=1,DEV=2"])
def test_a_retry_setting_that_cannot_be_read_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="SUREHAND_RETRY_MAX_ATTEMPTS"):
        schedule_for(Settings(retry_max_attempts=bad), "DEV", effects_observed=True)


def test_an_overload_is_read_from_the_error_or_the_output_tails() -> None:
    assert overloaded(attempt_with(error="AgentError: command exited with 1: 429 Too Many"))
    assert overloaded(attempt_with(output={"stdout": '{"result":"API Error: 529 Overloaded"}'}))
    assert not overloaded(attempt_with(error="AgentError: command exited with 3: bad spec"))


def attempt_with(*, error: str | None = None, output: dict[str, str] | None = None) -> Attempt:
    return Attempt(
        attempt_id="a1",
        task_id="TASK-20261130-001",
        number=1,
        state=AttemptState.FAILED,
        worker="w",
        lease_id="a1",
        agent_returned=False,
        result=None,
        error=error,
        bound_operation_id=None,
        case_id=None,
        lease_missing_since=None,
        started_at=datetime(2026, 11, 30, tzinfo=UTC),
        ended_at=None,
        cause=AttemptCause.AGENT_FAILED,
        details={"output": output} if output else None,
    )


def test_a_retry_keeps_its_due_time_when_admission_runs_again(
    harness: Harness, clock: ManualClock
) -> None:
    agent, _ = scripted(["x"])
    sh = dev(harness, agent)
    task_id = committed_task(sh)
    sh.run_session(task_id)
    sh.reconcile()
    due = open_case(sh, task_id).retry_at
    clock.advance(1)

    again = sh.recover(task_id, actor="PM")

    assert again.case is not None
    assert again.case.retry_at == due
    assert due is not None
    assert due > clock.now() - timedelta(seconds=1)
    assert [a.state for a in attempts_of(sh.store, task_id)] == [AttemptState.FAILED]


def test_surehand_check_names_a_retry_or_budget_setting_that_cannot_be_read() -> None:
    from surehand.cli.agent_checks import check_unattended

    [good] = check_unattended(Settings(retry_max_attempts="QA=2", agent_budget_usd="QA=1"))
    [bad_retry] = check_unattended(Settings(retry_backoff_seconds="10,QA=soon"))
    [bad_budget] = check_unattended(Settings(agent_budget_usd="OPS=-3"))

    assert good.status == "ok"
    assert check_unattended(Settings()) == []  # the defaults: nothing to report
    assert (bad_retry.status, bad_budget.status) == ("fail", "fail")
    assert "SUREHAND_RETRY_BACKOFF_SECONDS" in bad_retry.detail
    assert "SUREHAND_AGENT_BUDGET_USD" in bad_budget.detail
