"""The real Claude Code under a real worker reports what it spent (issue 32, item 3).

A scripted model double (tests/model_doubles.py) answers with large token counts, so Claude
Code 2.1.332 prices them itself (its ``total_cost_usd``, per model in ``modelUsage``): the
attempt records the tokens, model and cost; a TASK whose budget is smaller than one answer's
cost is stopped by ``--max-budget-usd``, its attempt ends ``budget_spent`` and the TASK is held
with "budget spent: $X of $Y" until its approver raises the budget."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptCause, AttemptState, Bucket, EventKind
from surehand.store import Store
from tests.agent_clis import AgentClis
from tests.model_doubles import AnthropicDouble, Final, Script, Step, serving
from tests.procs import RedisServer, running, start_worker
from tests.session_helpers import attempts_of, events_of, read_task
from tests.shared.agent_clis import REPORT, claude_env, settled_by, submitted, worked

pytestmark = pytest.mark.slow

INPUT_TOKENS = 100_000
OUTPUT_TOKENS = 5_000


class CostlyDouble(AnthropicDouble):
    """Every answer reports ``INPUT_TOKENS`` in, ``OUTPUT_TOKENS`` out and some cache."""

    def events(self, step: Step, turn: int) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, data in super().events(step, turn):
            if name == "message_start":
                data["message"]["usage"] = {
                    "input_tokens": INPUT_TOKENS,
                    "output_tokens": 1,
                    "cache_read_input_tokens": 2_000,
                    "cache_creation_input_tokens": 300,
                }
            if name == "message_delta":
                data["usage"] = {"output_tokens": OUTPUT_TOKENS}
            yield name, data


def test_claude_code_reports_tokens_model_and_cost_which_the_attempt_records(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    with serving(CostlyDouble(Script([Final(REPORT)]))) as model:
        env = claude_env(store, broker, tmp_path, clis, model)
        task_id = worked(reconciling_client, store, env, tmp_path / "worker.log", or_held=True)

    assert read_task(store, task_id).bucket is Bucket.REVIEW
    [attempt] = attempts_of(store, task_id)
    assert attempt.details is not None
    usage = attempt.details["usage"]
    assert usage["input_tokens"] == INPUT_TOKENS
    assert usage["output_tokens"] == OUTPUT_TOKENS
    assert (usage["cache_read_tokens"], usage["cache_creation_tokens"]) == (2_000, 300)
    assert usage["model"] in usage["by_model"]
    assert usage["cost_usd"] > 0.1  # priced by Claude Code itself
    assert attempt.details["output"]["result"] == REPORT
    assert attempt.details["observed"] == "journaled"
    [report] = reconciling_client.reports(task_id)
    assert report.body == REPORT  # the JSON's result, not the JSON
    shown = subprocess.run(
        [sys.executable, "-m", "surehand", "show", task_id],
        env={"SUREHAND_DATABASE_URL": store.url, "COLUMNS": "250", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert f"{INPUT_TOKENS} in / {OUTPUT_TOKENS} out" in shown
    assert f"${usage['cost_usd']:.4f}" in shown


def test_a_budget_smaller_than_one_answer_stops_the_attempt_and_holds_the_task(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    client = reconciling_client
    with serving(CostlyDouble(Script([Final(REPORT)]))) as model:
        env = claude_env(store, broker, tmp_path, clis, model)
        with running(start_worker(env, tmp_path / "worker.log")) as worker:
            task_id = submitted(client, budget_usd=0.1)
            settled_by(client, store, task_id, worker, or_held=True)

            task = read_task(store, task_id)
            assert task.hold is not None
            assert "budget spent: $" in task.hold.reason
            assert "of $0.10" in task.hold.reason
            [attempt] = attempts_of(store, task_id)
            assert attempt.state is AttemptState.INTERRUPTED
            assert attempt.cause is AttemptCause.BUDGET_SPENT
            assert attempt.details is not None
            assert attempt.details["usage"]["cost_usd"] > 0.1
            assert client.reports(task_id) == []

            raised, case = client.raise_budget(
                task_id, budget_usd=50, note="the rotation is worth it", actor="PM"
            )
            assert raised.budget_usd == 50
            assert case is not None
            settled_by(client, store, task_id, worker)

    assert read_task(store, task_id).bucket is Bucket.REVIEW
    _first, second = attempts_of(store, task_id)
    assert second.cause is AttemptCause.RETURNED
    [event] = events_of(store, task_id, EventKind.BUDGET_RAISED)
    assert (event.by, event.reason) == ("PM", "the rotation is worth it")
