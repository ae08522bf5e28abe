"""Operations: the intent is committed before the effect runs and the outcome after it; what a
TASK already recorded for the same name and args decides whether the effect may run again."""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from surehand.agents.context import EffectResult
from surehand.dispatcher.context import Services
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.errors import OperationFailed
from surehand.facade import Surehand
from surehand.model import Admission, AttemptState, EffectFact, OperationState, RetryPolicy
from tests.session_helpers import (
    Harness,
    claimed,
    committed_task,
    marker_operation_args,
    operate_in_process,
    operations_of,
)


class Crash(BaseException):
    """Stands in for the process dying inside an effect: nothing after it runs."""


class Effect:
    """An effect that counts its runs and returns, raises or crashes as told."""

    def __init__(self, value: Any = "done", error: Exception | None = None) -> None:
        self.value, self.error, self.runs = value, error, 0

    def __call__(self) -> Any:
        self.runs += 1
        if self.error is not None:
            raise self.error
        return self.value


def declare(
    session: Session,
    effect: Callable[[], Any],
    *,
    name: str = "deploy",
    args: dict[str, Any] | None = None,
    key: str | None = None,
    policy: RetryPolicy = RetryPolicy.NONE,
) -> Any:
    return run_operation(
        session,
        name,
        {"env": "staging"} if args is None else args,
        effect,
        idempotency_key=key,
        retry_policy=policy,
        probe=None,
    )


def successor_of(sh: Surehand, session: Session) -> Session:
    """Lose ``session`` (as the reconciler would), expect a re-execution, claim the successor."""
    case = sh.recovery.lose(session.attempt, state=AttemptState.SESSION_LOST, by="test")
    assert case is not None
    assert case.admission is Admission.REEXECUTE, case
    return claimed(sh.services, session.task_id, worker="successor")


# -- intent before effect --------------------------------------------------------------------


def test_the_intent_is_committed_before_the_effect_runs(services: Services) -> None:
    session = claimed(services, committed_task(services))
    seen: list[tuple[OperationState, Any]] = []

    def effect() -> str:
        # Read through another connection: only committed rows are visible there.
        [op] = operations_of(services.store, session.task_id)
        seen.append((op.state, op.outcome))
        return "deployed"

    assert declare(session, effect) == "deployed"

    assert seen == [(OperationState.INTENT, None)]
    [op] = operations_of(services.store, session.task_id)
    assert op.state is OperationState.SUCCEEDED
    assert op.outcome == {"value": "deployed"}
    assert (op.attempt_id, op.epoch) == (session.attempt.attempt_id, 1)
    assert op.settled_at is not None


@pytest.mark.slow
def test_a_crash_after_the_intent_leaves_the_intent_without_an_outcome_or_effect(
    services: Services, tmp_path: Path
) -> None:
    task_id = committed_task(services)
    marker = tmp_path / "effect.txt"

    done = operate_in_process(
        services.store.url, task_id, marker, crash_at="operation.after_intent"
    )

    assert done.returncode == -signal.SIGKILL, done.stderr
    [op] = operations_of(services.store, task_id)
    assert op.state is OperationState.INTENT
    assert (op.outcome, op.settled_at, op.error) == (None, None, None)
    assert op.args == marker_operation_args(marker)
    assert not marker.exists()


@pytest.mark.slow
def test_a_crash_after_the_effect_leaves_an_open_intent_for_an_effect_that_happened(
    services: Services, tmp_path: Path
) -> None:
    task_id = committed_task(services)
    marker = tmp_path / "effect.txt"

    done = operate_in_process(
        services.store.url, task_id, marker, crash_at="operation.after_effect"
    )

    assert done.returncode == -signal.SIGKILL, done.stderr
    [op] = operations_of(services.store, task_id)
    assert op.state is OperationState.INTENT
    assert marker.exists()  # which is why an open intent is never repeated blindly


def test_the_fingerprint_is_the_lowercased_name_and_canonical_args(services: Services) -> None:
    session = claimed(services, committed_task(services))

    declare(session, Effect(), name="Deploy", args={"b": [1, 2], "a": "é"})

    [op] = operations_of(services.store, session.task_id)
    canonical = json.dumps({"a": "é", "b": [1, 2]}, separators=(",", ":"), ensure_ascii=False)
    expected = hashlib.sha256(f"deploy\n{canonical}".encode()).hexdigest()[:24]
    assert op.fingerprint == expected


def test_an_effect_result_records_its_external_receipt(services: Services) -> None:
    session = claimed(services, committed_task(services))

    value = declare(session, lambda: EffectResult(value={"id": 7}, external_receipt="ch_123"))

    assert value == {"id": 7}
    [op] = operations_of(services.store, session.task_id)
    assert (op.outcome, op.external_receipt) == ({"value": {"id": 7}}, "ch_123")


# -- recorded outcomes are not repeated ------------------------------------------------------


def test_a_recorded_success_is_returned_without_running_the_effect_again(
    services: Services,
) -> None:
    session = claimed(services, committed_task(services))
    first, second = Effect("v1"), Effect("v2")

    assert declare(session, first) == "v1"
    assert declare(session, second) == "v1"

    assert (first.runs, second.runs) == (1, 0)
    assert len(operations_of(services.store, session.task_id)) == 1


def test_a_later_attempt_gets_the_recorded_outcome_without_running_the_effect(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    first = claimed(sh.services, committed_task(sh))
    original, repeat = Effect("deployed v1"), Effect("deployed twice")
    declare(first, original, key="deploy-1", policy=RetryPolicy.KEYED)

    successor = successor_of(sh, first)
    value = declare(successor, repeat, key="deploy-1", policy=RetryPolicy.KEYED)

    assert value == "deployed v1"
    assert (original.runs, repeat.runs) == (1, 0)
    [op] = operations_of(sh.store, first.task_id)
    assert op.attempt_id == first.attempt.attempt_id


def test_different_args_are_a_different_operation(services: Services) -> None:
    session = claimed(services, committed_task(services))
    one, other = Effect(), Effect()

    declare(session, one, args={"env": "staging"})
    declare(session, other, args={"env": "production"})

    assert (one.runs, other.runs) == (1, 1)
    assert len(operations_of(services.store, session.task_id)) == 2


# -- failed effects --------------------------------------------------------------------------


def test_an_effect_that_raises_is_recorded_failed_and_raises_operation_failed(
    services: Services,
) -> None:
    session = claimed(services, committed_task(services))

    with pytest.raises(OperationFailed, match="ConnectionError: gateway timeout"):
        declare(session, Effect(error=ConnectionError("gateway timeout")))

    [op] = operations_of(services.store, session.task_id)
    assert op.state is OperationState.FAILED
    assert op.error == "ConnectionError: gateway timeout"
    assert op.outcome is None
    assert op.settled_at is not None


def test_a_failed_effect_without_a_key_is_not_repeated(services: Services) -> None:
    session = claimed(services, committed_task(services))
    with pytest.raises(OperationFailed):
        declare(session, Effect(error=TimeoutError("no answer")))
    repeat = Effect()

    with pytest.raises(OperationFailed, match="may have taken effect"):
        declare(session, repeat)

    assert repeat.runs == 0
    assert len(operations_of(services.store, session.task_id)) == 1


def test_a_failed_keyed_effect_is_repeated_with_the_same_key(services: Services) -> None:
    session = claimed(services, committed_task(services))
    with pytest.raises(OperationFailed):
        declare(
            session, Effect(error=TimeoutError("no answer")), key="k1", policy=RetryPolicy.KEYED
        )
    repeat = Effect("charged once")

    value = declare(session, repeat, key="k1", policy=RetryPolicy.KEYED)

    assert (value, repeat.runs) == ("charged once", 1)
    states = [op.state for op in operations_of(services.store, session.task_id)]
    assert states == [OperationState.FAILED, OperationState.SUCCEEDED]


@pytest.mark.parametrize(
    ("first_key", "first_policy", "repeat_key"),
    [
        (None, RetryPolicy.NONE, "k1"),  # the first try had no key the far side could dedupe on
        ("k1", RetryPolicy.NONE, "k1"),  # the first try did not allow a keyed repeat
        ("k1", RetryPolicy.KEYED, "k2"),  # a new key would not dedupe against the first try
    ],
)
def test_a_failed_effect_is_not_repeated_under_a_key_that_cannot_dedupe_it(
    services: Services, first_key: str | None, first_policy: RetryPolicy, repeat_key: str
) -> None:
    session = claimed(services, committed_task(services))
    with pytest.raises(OperationFailed):
        declare(session, Effect(error=TimeoutError("?")), key=first_key, policy=first_policy)
    repeat = Effect()

    with pytest.raises(OperationFailed, match="not repeated"):
        declare(session, repeat, key=repeat_key, policy=RetryPolicy.KEYED)

    assert repeat.runs == 0


# -- an interrupted keyed effect bound to its successor --------------------------------------


def test_an_interrupted_keyed_effect_runs_once_more_in_its_admitted_successor(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    first = claimed(sh.services, committed_task(sh))
    with pytest.raises(Crash):
        declare(first, _crash, key="pay-1", policy=RetryPolicy.KEYED)
    case = sh.recovery.lose(first.attempt, state=AttemptState.SESSION_LOST, by="test")
    assert case is not None
    assert (case.effect_fact, case.admission) == (EffectFact.SINGLE_VERIFIED, Admission.REEXECUTE)
    successor = claimed(sh.services, first.task_id, worker="successor")
    repeat = Effect("paid")

    value = declare(successor, repeat, key="pay-1", policy=RetryPolicy.KEYED)

    assert (value, repeat.runs) == ("paid", 1)
    [op] = operations_of(sh.store, first.task_id)  # the same row, now settled by the successor
    assert op.state is OperationState.SUCCEEDED
    assert (op.attempt_id, op.epoch) == (successor.attempt.attempt_id, 2)
    assert op.operation_id == case.bound_operation_id


def test_a_bound_successor_may_not_repeat_the_effect_under_another_key(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    first = claimed(sh.services, committed_task(sh))
    with pytest.raises(Crash):
        declare(first, _crash, key="pay-1", policy=RetryPolicy.KEYED)
    sh.recovery.lose(first.attempt, state=AttemptState.SESSION_LOST, by="test")
    successor = claimed(sh.services, first.task_id, worker="successor")
    repeat = Effect()

    with pytest.raises(OperationFailed, match="key"):
        declare(successor, repeat, key="pay-2", policy=RetryPolicy.KEYED)

    assert repeat.runs == 0
    [op] = operations_of(sh.store, first.task_id)
    assert op.state is OperationState.INTENT


def _crash() -> None:
    raise Crash
