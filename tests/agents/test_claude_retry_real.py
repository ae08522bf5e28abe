"""The real Claude Code, overloaded twice, is retried on evidence (issue 32, item 4).

The model double answers HTTP 529 ``overloaded_error`` with ``x-should-retry: false`` to the
first two sessions (Claude Code 2.1.332 then does not retry inside the session: one request,
exit 1, "API Error: 529 Overloaded" in its JSON result) and serves the third. The claude
preset's hooks journal its effectful calls, so its effects are observed and the role's retry
policy applies: the TASK ends in review after two automatic retries, each started no sooner
than the ``retry_at`` admission stored, with the overload backoff (not the plain one)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptCause, Bucket
from surehand.store import Store
from tests.agent_clis import AgentClis
from tests.model_doubles import AnthropicDouble, Final, Refusal, Script, serving
from tests.procs import RedisServer
from tests.session_helpers import attempts_of, read_task
from tests.shared.agent_clis import REPORT, claude_env, worked

# The plain backoff is far longer than the overload's: a retry due within the overload's
# bounds shows the overload backoff was the one applied.
RETRY = {
    "retry_backoff_seconds": "30",
    "retry_overload_backoff_seconds": "1",
    "retry_max_attempts": "3",
}
OVERLOADED = Refusal(
    529,
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    {"x-should-retry": "false"},
)


pytestmark = [pytest.mark.slow, pytest.mark.retry_settings(**RETRY)]


class OverloadedDouble(AnthropicDouble):
    """Answers 529 to every request of the first ``sessions`` Claude Code sessions."""

    def __init__(self, script: Script, sessions: int) -> None:
        super().__init__(script)
        self.sessions = sessions
        self.refused: list[str] = []
        self.lock = threading.Lock()

    def refusal(self, body: dict[str, Any]) -> Refusal | None:
        session = session_of(body)
        with self.lock:
            if session in self.refused or len(self.refused) < self.sessions:
                if session not in self.refused:
                    self.refused.append(session)
                return OVERLOADED
        return None


def session_of(body: dict[str, Any]) -> str:
    """Claude Code's session id, from the request's ``metadata.user_id`` (a JSON object)."""
    user = (body.get("metadata") or {}).get("user_id") or "{}"
    return str(json.loads(user).get("session_id"))


def test_claude_code_overloaded_twice_ends_in_review_after_two_automatic_retries(
    store: Store,
    broker: RedisServer,
    deciding_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    client = deciding_client
    with serving(OverloadedDouble(Script([Final(REPORT)]), sessions=2)) as model:
        env = claude_env(store, broker, tmp_path, clis, model)
        env.update({f"SUREHAND_{k.upper()}": v for k, v in RETRY.items()})
        task_id = worked(client, store, env, tmp_path / "worker.log", or_held=True)

    assert isinstance(model, OverloadedDouble)
    assert len(model.refused) == 2  # two sessions refused, one request each: no inner retry
    task = read_task(store, task_id)
    assert task.hold is None
    assert task.bucket is Bucket.REVIEW
    found = attempts_of(store, task_id)
    assert [a.cause for a in found] == [
        AttemptCause.AGENT_FAILED,
        AttemptCause.AGENT_FAILED,
        AttemptCause.RETURNED,
    ]
    for failed in found[:2]:
        assert failed.details is not None
        assert failed.details["observed"] == "journaled"
        assert "529" in json.dumps(failed.details["output"])
    cases = sorted(client.cases(task_id=task_id), key=lambda c: c.interrupted_epoch)
    # The overload backoff: 1 s then 2 s, jittered between half and all of it (the plain
    # backoff would be 15 s at least).
    for case, (least, most), successor in zip(
        cases, ((0.5, 1.0), (1.0, 2.0)), found[1:], strict=True
    ):
        retry = case.effect_refs["retry"]
        assert retry["overloaded"] is True
        assert retry["max_attempts"] == 3
        assert case.retry_at is not None
        ended = found[case.interrupted_epoch - 1].ended_at
        assert ended is not None
        assert least <= (case.retry_at - ended).total_seconds() <= most + 10.0  # < 15
        assert successor.started_at >= case.retry_at
    assert [c["attempt"] for c in (case.effect_refs["retry"] for case in cases)] == [2, 3]
    [report] = client.reports(task_id)
    assert report.body == REPORT
