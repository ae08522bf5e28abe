"""A session whose first lease acquire succeeded in Redis but whose reply was lost (issue 10,
finding 5): the runner's retry finds its own attempt in the key and runs the session, instead
of rolling its own first attempt back as "lease stayed held by another attempt"."""

from __future__ import annotations

from typing import Any

import pytest

from surehand.agents.context import SessionContext
from surehand.errors import LeaseUnavailable
from surehand.model import AttemptState, Bucket
from surehand.queue.leases import LeaseStore
from tests.session_helpers import Harness, attempts_of, committed_task, read_task


def lose_the_first_reply(monkeypatch: pytest.MonkeyPatch, leases: LeaseStore) -> list[str]:
    """The first acquire runs in Redis, then its caller sees LeaseUnavailable (as when the
    connection drops after the server executed the command). Returns the calls made."""
    calls: list[str] = []
    real = leases.acquire_with_generation

    def flaky(task_id: str, attempt_id: str, ttl_ms: int) -> tuple[bool, str]:
        answer = real(task_id, attempt_id, ttl_ms)
        calls.append(attempt_id)
        if len(calls) == 1:
            raise LeaseUnavailable("test: the reply was lost", action="acquire", task_id=task_id)
        return answer

    monkeypatch.setattr(leases, "acquire_with_generation", flaky)
    return calls


def test_an_acquire_whose_reply_was_lost_still_runs_the_session(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    def agent(ctx: SessionContext) -> Any:
        runs.append(ctx.task.task_id)
        return "done"

    # A short TTL keeps the failing case short: the old runner retried until one TTL passed.
    sh = harness.surehand(lease_ttl_seconds=1.0)
    sh.registry.register("DEV", agent)
    task_id = committed_task(sh)
    calls = lose_the_first_reply(monkeypatch, sh.leases)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "settled", outcome
    assert runs == [task_id]
    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.state is AttemptState.SUCCEEDED
    assert calls == [attempt.attempt_id, attempt.attempt_id]
    assert read_task(sh.store, task_id).bucket is Bucket.REVIEW
    assert sh.leases.holder(task_id) is None  # released at the end as usual
