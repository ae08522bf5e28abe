"""``write_task`` explored by a machine (``tests/explore_submissions.py``), on SQLite and
Postgres; counterexamples it found are kept below as plain regression tests."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from surehand.crashpoints import CrashPoint
from surehand.dispatcher.submissions import _Submission
from surehand.store import Store
from tests.explore_submissions import (
    Reads,
    SubmissionMachine,
    SubmissionWorld,
    counting_reads,
)
from tests.explore_world import Crashes, budget


@pytest.fixture
def submission_world(store: Store, monkeypatch: pytest.MonkeyPatch) -> SubmissionWorld:
    crashes = Crashes()
    crashes.install(monkeypatch)
    reads = Reads()
    monkeypatch.setattr(_Submission, "_read", counting_reads(reads))
    return SubmissionWorld(store, crashes, reads)


def test_write_task_keeps_one_task_per_submission_in_every_interleaving(
    submission_world: SubmissionWorld,
) -> None:
    run_state_machine_as_test(lambda: SubmissionMachine(submission_world), settings=budget())  # type: ignore[arg-type]  # a factory works


# -- regressions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kill", [CrashPoint.WRITE_TASK_BEFORE_COMMIT, CrashPoint.WRITE_TASK_AFTER_COMMIT]
)
def test_a_retry_after_a_kill_names_the_one_task_of_the_submission(
    submission_world: SubmissionWorld, kill: CrashPoint
) -> None:
    machine = SubmissionMachine(submission_world)
    machine.submit(tenant="acme", sid="sub-a", variant=0, kill=kill, response_lost=False)
    machine.a_submission_names_one_task()

    machine.submit(tenant="acme", sid="sub-a", variant=0, kill=None, response_lost=False)

    identity = machine.known[("acme", "sub-a")].identity
    assert identity is not None
    assert machine.known[("acme", "sub-a")].named == {identity[0]}
    assert submission_world.reads.count <= 1
    machine.a_submission_names_one_task()


def test_a_different_request_under_a_used_submission_id_is_a_conflict_that_creates_nothing(
    submission_world: SubmissionWorld,
) -> None:
    machine = SubmissionMachine(submission_world)
    machine.submit(tenant="acme", sid="sub-a", variant=0, kill=None, response_lost=False)

    machine.submit(tenant="acme", sid="sub-a", variant=1, kill=None, response_lost=False)

    assert len(machine.known[("acme", "sub-a")].named) == 1
    machine.a_submission_names_one_task()


def test_one_submission_id_in_two_tenants_names_two_tasks_one_each(
    submission_world: SubmissionWorld,
) -> None:
    machine = SubmissionMachine(submission_world)
    machine.submit(tenant="acme", sid="sub-a", variant=0, kill=None, response_lost=False)

    machine.submit(tenant="globex", sid="sub-a", variant=0, kill=None, response_lost=False)

    acme, globex = (machine.known[(tenant, "sub-a")].named for tenant in ("acme", "globex"))
    assert len(acme) == len(globex) == 1
    assert acme != globex
    machine.a_submission_names_one_task()
