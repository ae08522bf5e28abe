"""The real Codex under a real worker reports its tokens (issue 32, item 3).

A scripted Responses API double (tests/model_doubles.py) reports large token counts in its
``response.completed``; Codex 0.171.0 prints them in its ``turn.completed`` event and the
attempt records them with the model of the command line. Codex reports no cost, so none is
recorded; and its effects are not observed (no hooks), so nothing marks them so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import Bucket
from surehand.store import Store
from tests.agent_clis import AgentClis
from tests.model_doubles import Final, OpenAIResponsesDouble, Script, Step, serving
from tests.procs import RedisServer
from tests.session_helpers import attempts_of, read_task
from tests.shared.agent_clis import MODEL_HOST, REPORT, codex_env, worked

pytestmark = pytest.mark.slow

INPUT_TOKENS = 70_000
OUTPUT_TOKENS = 3_000


class CostlyResponsesDouble(OpenAIResponsesDouble):
    """Every answer reports ``INPUT_TOKENS`` in and ``OUTPUT_TOKENS`` out."""

    def events(self, step: Step, turn: int) -> Iterator[tuple[str, dict[str, Any]]]:
        for name, data in super().events(step, turn):
            if name == "response.completed":
                data["response"]["usage"] = {
                    "input_tokens": INPUT_TOKENS,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": OUTPUT_TOKENS,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
                }
            yield name, data


def test_codex_reports_its_tokens_which_the_attempt_records_with_its_model(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
    sessions_off_tmp: Path,
) -> None:
    with serving(CostlyResponsesDouble(Script([Final(REPORT)])), MODEL_HOST) as model:
        env = codex_env(store, broker, tmp_path, clis, model, sessions_off_tmp)
        task_id = worked(reconciling_client, store, env, tmp_path / "worker.log")

    assert read_task(store, task_id).bucket is Bucket.REVIEW
    [attempt] = attempts_of(store, task_id)
    assert attempt.details is not None
    usage = attempt.details["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (INPUT_TOKENS, OUTPUT_TOKENS)
    assert usage["model"] == "gpt-5-codex"
    assert usage["cost_usd"] is None  # Codex reports no cost
    assert not attempt.details.get("observed")  # no hooks: a failure would be held
