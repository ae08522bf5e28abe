"""``write_task`` explored by a machine (``tests/explore_submissions.py``), on SQLite and
Postgres; counterexamples it found are kept below as plain regression tests."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from surehand.dispatcher.submissions import _Submission
from surehand.store import Store
from tests.explore_submissions import Reads, SubmissionMachine, SubmissionWorld, counting_reads
from tests.explore_world import Crashes, budget


@pytest.fixture
def world(store: Store, monkeypatch: pytest.MonkeyPatch) -> SubmissionWorld:
    crashes = Crashes()
    crashes.install(monkeypatch)
    reads = Reads()
    monkeypatch.setattr(_Submission, "_read", counting_reads(reads))
    return SubmissionWorld(store, crashes, reads)


def test_write_task_keeps_one_task_per_submission_in_every_interleaving(
    world: SubmissionWorld,
) -> None:
    run_state_machine_as_test(lambda: SubmissionMachine(world), settings=budget())  # type: ignore[arg-type]  # a factory works

