"""Cost accounting and budgets (issue 32, item 3) without a real CLI: what Claude Code's and
Codex's output say they spent, a TASK's budget on write_task (digested only when given), the
hold of an attempt its budget stopped, and an approver raising the budget."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from surehand.agents.accounting import claude_result, codex_model, codex_usage
from surehand.agents.budgets import Budget, role_budget
from surehand.agents.context import SessionContext
from surehand.agents.presets import Invocation, PresetOptions, claude_argv
from surehand.config import Settings
from surehand.digest import request_digest
from surehand.errors import ConfigError, NotAuthorized, SessionInterrupted, ValidationFailed
from surehand.facade import Surehand
from surehand.model import Admission, AttemptCause, AttemptState, EventKind, TaskFields
from surehand.requests import TaskRequest, parse_task_request
from tests.session_helpers import Harness, attempts_of, committed_task, events_of, read_task

# What Claude Code 2.1.332 printed against the model double (trimmed of fields not read).
CLAUDE_SUCCESS = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "result": "all done",
    "total_cost_usd": 0.5019,
    "usage": {"input_tokens": 100000, "output_tokens": 5000},
    "modelUsage": {
        "claude-opus-5-5": {
            "inputTokens": 100000,
            "outputTokens": 5000,
            "cacheReadInputTokens": 2000,
            "cacheCreationInputTokens": 300,
            "costUSD": 0.5019,
        }
    },
}
# Stopped by --max-budget-usd: its ``usage`` is zeroed, ``modelUsage`` keeps the counts.
CLAUDE_BUDGET = {
    **CLAUDE_SUCCESS,
    "subtype": "error_max_budget_usd",
    "is_error": True,
    "result": "",
    "usage": {"input_tokens": 0, "output_tokens": 0},
    "errors": ["Reached maximum budget ($0.1)"],
}
CODEX_EVENTS = "\n".join(
    json.dumps(event)
    for event in (
        {"type": "thread.started", "thread_id": "t"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "done"}},
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 7,
                "cached_input_tokens": 3,
                "cache_write_input_tokens": 0,
                "output_tokens": 2,
            },
        },
        {
            "type": "turn.completed",
            "usage": {
                "input_tokens": 5,
                "cached_input_tokens": 1,
                "cache_write_input_tokens": 4,
                "output_tokens": 1,
            },
        },
    )
)


def test_claude_codes_result_gives_its_message_tokens_model_and_cost() -> None:
    found = claude_result("some noise\n" + json.dumps(CLAUDE_SUCCESS) + "\n")

    assert found is not None
    assert (found.result, found.is_error, found.budget_spent) == ("all done", False, False)
    assert found.usage is not None
    usage = {k: v for k, v in found.usage.items() if k != "by_model"}
    assert usage == {
        "input_tokens": 100000,
        "output_tokens": 5000,
        "cache_read_tokens": 2000,
        "cache_creation_tokens": 300,
        "model": "claude-opus-5-5",
        "cost_usd": 0.5019,
    }


def test_a_result_stopped_by_the_budget_keeps_its_counts_from_model_usage() -> None:
    found = claude_result(json.dumps(CLAUDE_BUDGET))

    assert found is not None
    assert found.budget_spent
    assert found.errors == ("Reached maximum budget ($0.1)",)
    assert found.usage is not None
    assert found.usage["input_tokens"] == 100000


@pytest.mark.parametrize(
    "printed",
    ["", "plain text", "{not json", json.dumps({"type": "other"}), json.dumps([1, 2])],
)
def test_output_that_is_no_result_is_no_accounting(printed: str) -> None:
    assert claude_result(printed) is None
    assert codex_usage(printed, None) is None


def test_numbers_that_are_not_counts_count_nothing() -> None:
    hostile = {**CLAUDE_SUCCESS, "total_cost_usd": "lots"}
    hostile["modelUsage"] = {"m": {"inputTokens": -5, "outputTokens": True}}
    found = claude_result(json.dumps(hostile))

    assert found is not None
    assert found.usage is not None
    assert (found.usage["input_tokens"], found.usage["output_tokens"]) == (0, 0)
    assert found.usage["cost_usd"] == 0


def test_codex_usage_sums_its_turns_and_names_the_model_of_its_command_line() -> None:
    usage = codex_usage(CODEX_EVENTS, codex_model(["codex", "-m", "gpt-5-codex", "exec"]))

    assert usage == {
        "input_tokens": 12,
        "output_tokens": 3,
        "cache_read_tokens": 4,
        "cache_creation_tokens": 4,
        "model": "gpt-5-codex",
        "cost_usd": None,
    }


def test_the_claude_preset_asks_for_json_and_passes_what_is_left_of_the_budget() -> None:
    session = Invocation(session_dir=__import__("pathlib").Path("/s"), mcp_url=None)
    plain = claude_argv(["claude"], session, PresetOptions())
    limited = claude_argv(
        ["claude"], Invocation(session.session_dir, None, budget_usd=0.25), PresetOptions()
    )

    assert plain[plain.index("--output-format") + 1] == "json"
    assert "--max-budget-usd" not in plain
    assert limited[limited.index("--max-budget-usd") + 1] == "0.250000"


# -- budget_usd on write_task -----------------------------------------------------------------


def test_a_request_without_a_budget_keeps_its_digest_and_one_with_it_differs() -> None:
    fields = TaskFields(sender="PM", recipient="DEV", subject="s", body="b")
    with_budget = TaskFields(sender="PM", recipient="DEV", subject="s", body="b", budget_usd=5)

    # The golden digest of this request before budgets existed.
    assert request_digest(fields) == request_digest(
        TaskRequest(sender="PM", recipient="DEV", subject="s", body="b").to_fields()
    )
    assert "budget_usd" not in fields.digest_dict()
    assert with_budget.digest_dict()["budget_usd"] == "5"
    assert request_digest(with_budget) != request_digest(fields)
    assert request_digest(
        TaskFields(sender="PM", recipient="DEV", subject="s", body="b", budget_usd=5.0)
    ) == request_digest(with_budget)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 2_000_000])
def test_a_budget_must_be_a_positive_amount(bad: float) -> None:
    with pytest.raises(ValidationFailed, match="budget_usd"):
        parse_task_request({"sender": "PM", "recipient": "DEV", "subject": "s", "budget_usd": bad})


def test_the_same_submission_with_another_budget_is_a_conflict(harness: Harness) -> None:
    sh = harness.surehand()
    first = sh.write_task(
        sender="PM", recipient="DEV", subject="s", client_submission_id="b-1", budget_usd=5
    )
    again = sh.write_task(
        sender="PM", recipient="DEV", subject="s", client_submission_id="b-1", budget_usd=5
    )
    other = sh.write_task(
        sender="PM", recipient="DEV", subject="s", client_submission_id="b-1", budget_usd=6
    )

    assert (first.disposition.value, again.disposition.value) == ("created", "reused")
    assert other.disposition.value == "conflict"
    assert first.task_id is not None
    assert read_task(sh.store, first.task_id).budget_usd == 5


def test_a_role_budget_setting_that_cannot_be_read_is_a_config_error() -> None:
    assert role_budget(Settings(agent_budget_usd="2,QA=0.5"), "QA") == 0.5
    assert role_budget(Settings(agent_budget_usd="2,QA=0.5"), "DEV") == 2
    assert role_budget(Settings(), "DEV") is None
    with pytest.raises(ConfigError, match="SUREHAND_AGENT_BUDGET_USD"):
        role_budget(Settings(agent_budget_usd="DEV=free"), "DEV")


# -- an attempt its budget stopped --------------------------------------------------------------


def spender(cost: float) -> Any:
    """A Python agent whose CLI reported ``cost`` and was stopped by its budget, the first
    time; then it returns."""

    def agent(ctx: SessionContext) -> str:
        if ctx.attempt.number == 1:
            ctx.note(usage={"cost_usd": cost, "input_tokens": 10, "model": "m"})
            raise Budget(0.1, 0).spent_by({"cost_usd": cost})
        return "done within the raised budget"

    return agent


def budget_held(harness: Harness, **task: Any) -> tuple[Surehand, str]:
    sh = harness.surehand()
    sh.registry.register("DEV", spender(0.5))
    task_id = committed_task(sh, budget_usd=0.1, **task)
    sh.run_session(task_id)
    sh.reconcile()
    return sh, task_id


def test_an_attempt_its_budget_stopped_holds_the_task_with_what_was_spent(
    harness: Harness,
) -> None:
    sh, task_id = budget_held(harness)

    [attempt] = attempts_of(sh.store, task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.BUDGET_SPENT)
    task = read_task(sh.store, task_id)
    assert task.hold is not None
    assert "budget spent: $0.50 of $0.10" in task.hold.reason
    assert sh.run_session(task_id).outcome == "not_claimed"


def test_only_an_approver_raises_a_budget_and_only_upwards(harness: Harness) -> None:
    sh, task_id = budget_held(harness)

    with pytest.raises(NotAuthorized):
        sh.raise_budget(task_id, budget_usd=5, note="more", actor="DEV")
    with pytest.raises(ValidationFailed, match="above the current budget"):
        sh.raise_budget(task_id, budget_usd=0.05, note="less", actor="PM")
    with pytest.raises(ValidationFailed, match="note"):
        sh.raise_budget(task_id, budget_usd=5, note=" ", actor="PM")
    assert events_of(sh.store, task_id, EventKind.BUDGET_RAISED) == []


def test_a_raised_budget_lets_a_successor_run(harness: Harness) -> None:
    sh, task_id = budget_held(harness)

    task, case = sh.raise_budget(task_id, budget_usd=2, note="worth it", actor="PM")

    assert task.budget_usd == 2
    assert case is not None
    assert case.admission is Admission.REEXECUTE
    assert read_task(sh.store, task_id).hold is None
    assert sh.run_session(task_id).bucket == "review"
    [event] = events_of(sh.store, task_id, EventKind.BUDGET_RAISED)
    assert (event.by, event.reason) == ("PM", "worth it")
    assert (event.data["from_usd"], event.data["to_usd"]) == (0.1, 2)


def test_a_budget_raised_but_still_spent_keeps_the_hold(harness: Harness) -> None:
    sh, task_id = budget_held(harness)

    _, case = sh.raise_budget(task_id, budget_usd=0.3, note="a little", actor="PM")

    assert case is not None
    assert case.admission is Admission.HOLD_FOR_REVIEW
    hold = read_task(sh.store, task_id).hold
    assert hold is not None
    assert "budget spent: $0.50 of $0.30" in hold.reason


def test_an_open_intent_holds_a_budget_stopped_attempt_for_its_effect(harness: Harness) -> None:
    def agent(ctx: SessionContext) -> str:
        def effect() -> None:
            raise SystemExit("stopped mid-effect")

        with contextlib.suppress(SystemExit):
            ctx.operation("deploy", {"env": "prod"}, effect)
        raise SessionInterrupted("budget spent: $1.00 of $0.10", cause="budget_spent")

    sh = harness.surehand()
    sh.registry.register("DEV", agent)
    task_id = committed_task(sh, budget_usd=0.1)
    sh.run_session(task_id)
    sh.reconcile()

    _, case = sh.raise_budget(task_id, budget_usd=5, note="go on", actor="PM")

    hold = read_task(sh.store, task_id).hold
    assert hold is not None
    assert "open intent" in hold.reason
    assert case is not None
    assert case.admission is Admission.HOLD_FOR_REVIEW


def test_reported_usage_is_counted_in_prometheus_by_role_and_model() -> None:
    from prometheus_client import REGISTRY

    from surehand import metrics

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    tokens = {"role": "QA", "model": "claude-opus-5-5", "kind": "input"}
    before = sample("surehand_agent_tokens_total", **tokens)
    cost_before = sample("surehand_agent_cost_usd_total", role="QA", model="claude-opus-5-5")
    found = claude_result(json.dumps(CLAUDE_SUCCESS))
    assert found is not None

    metrics.observe_agent_usage("QA", found.usage)
    metrics.observe_agent_usage("QA", None)  # nothing reported: nothing counted

    assert sample("surehand_agent_tokens_total", **tokens) - before == 100000
    cost = sample("surehand_agent_cost_usd_total", role="QA", model="claude-opus-5-5")
    assert cost - cost_before == pytest.approx(0.5019)


def test_the_api_and_the_console_raise_a_budget_as_the_approver(harness: Harness) -> None:
    from fastapi.testclient import TestClient

    from surehand.api import create_app
    from tests.shared.ui import csrf_of, sign_in

    sh = harness.surehand(api_tokens="pm=alice:PM:default,dev=dave:DEV:default")
    sh.registry.register("DEV", spender(0.5))
    task_id = committed_task(sh, budget_usd=0.1)
    sh.run_session(task_id)
    sh.reconcile()
    client = TestClient(create_app(sh), base_url="http://127.0.0.1", follow_redirects=False)
    body = {"budget_usd": 0.3, "note": "a little more"}

    refused = client.post(
        f"/v1/tasks/{task_id}/budget", json=body, headers={"Authorization": "Bearer dev"}
    )
    raised = client.post(
        f"/v1/tasks/{task_id}/budget", json=body, headers={"Authorization": "Bearer pm"}
    )

    assert refused.status_code == 403, refused.text
    assert raised.status_code == 200, raised.text
    assert raised.json()["task"]["budget_usd"] == 0.3
    assert raised.json()["case"]["admission"] == "hold_for_review"  # $0.50 spent of $0.30
    sign_in(client, "pm")
    page = client.get(f"/ui/tasks/{task_id}").text
    assert "Spent by its agent: <strong>$0.50</strong>" in page
    assert 'id="budget-form"' in page
    answer = client.post(
        f"/ui/tasks/{task_id}/budget",
        data={"budget_usd": "2", "note": "worth it", "csrf_token": csrf_of(page)},
    )
    assert answer.status_code == 303, answer.text
    assert "done=budget-runs" in answer.headers["location"]
    assert read_task(sh.store, task_id).hold is None
    [first, second] = events_of(sh.store, task_id, EventKind.BUDGET_RAISED)
    assert (first.principal, second.principal) == ("alice", "alice")
