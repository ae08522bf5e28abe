"""Crash points are a closed set (``surehand.crashpoints.CrashPoint``): a name that is none of
them fails loudly instead of never firing, and every one of them has a crash test -- the one
missing so far (``operation.after_outcome``) is here, under real workers on Postgres."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from surehand.crashpoints import CrashPoint, crash_point
from surehand.errors import ConfigError
from surehand.model import Admission, AttemptState, Bucket, EffectFact
from tests.shared.chaos import Chaos, postgres_only

TESTS = Path(__file__).parents[1]


def test_a_name_that_is_no_crash_point_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUREHAND_CRASH_AT", "operation.after_intnet")

    with pytest.raises(ConfigError, match=r"operation\.after_intnet, which no crash point is"):
        crash_point(CrashPoint.OPERATION_AFTER_INTENT)


def crash_tests() -> set[str]:
    """The crash points some test kills a process at (``crash_at=...`` in tests/)."""
    found: set[str] = set()
    for path in TESTS.rglob("test_*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if "crash_at" not in line:
                continue
            found.update(re.findall(r'"((?:session|operation)\.[a-z_]+)"', line))
            members = re.findall(r"CrashPoint\.([A-Z_]+)", line)
            found.update(CrashPoint[member].value for member in members)
            stages = re.findall(r'crash_at\(store, "([a-z_]+)"\)', line)
            found.update(f"write_task.{stage}" for stage in stages)
    return found


@pytest.mark.parametrize("point", list(CrashPoint))
def test_every_crash_point_has_a_crash_test(point: CrashPoint) -> None:
    assert point.value in crash_tests(), f"no test crashes a process at {point}"


@pytest.mark.slow
@postgres_only
def test_kill_after_an_outcome_was_recorded_reruns_the_agent_and_the_effect_is_already_done(
    chaos: Chaos,
) -> None:
    """Crash point ``operation.after_outcome``: the effect ran and its outcome is recorded, the
    agent never returned. Every declared effect is settled, so a successor runs the agent
    again, and the effect answers already_done from the records: it happened once."""
    doomed = chaos.worker("one_effect", crash_at=CrashPoint.OPERATION_AFTER_OUTCOME.value)
    chaos.reconcile_in_background()
    task_id = chaos.submit()
    chaos.wait_dead(doomed)
    chaos.worker("one_effect")

    case = chaos.decided(task_id)
    chaos.wait(lambda: chaos.task(task_id).bucket is Bucket.REVIEW, "the successor to settle")

    assert (case.effect_fact, case.admission) == (EffectFact.NONE_VERIFIED, Admission.REEXECUTE)
    assert [e["attempt"] for e in chaos.effects(task_id)] == [1]
    assert [a.state for a in chaos.attempts(task_id)] == [
        AttemptState.SESSION_LOST,
        AttemptState.SUCCEEDED,
    ]
