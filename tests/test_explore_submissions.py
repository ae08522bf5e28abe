"""``write_task`` explored by a machine (``tests/explore_submissions.py``), on SQLite and
Postgres; counterexamples it found are kept below as plain regression tests."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from surehand.dispatcher.submissions import _Submission
from surehand.model import ReceiptState
from surehand.store import Store
from tests.explore_submissions import Reads, SubmissionMachine, SubmissionWorld, counting_reads
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


# -- counterexamples the exploration found ------------------------------------------------------


def died_holding_a_reservation(
    submission_world: SubmissionWorld, *, held_for: float, at_the_id: str
) -> SubmissionMachine:
    """A machine whose writer of acme's ``sub-a`` died holding its reservation for
    ``held_for`` more seconds, the preallocated id ``at_the_id``."""
    machine = SubmissionMachine(submission_world)
    machine.a_writer_died_midway(
        tenant="acme",
        sid="sub-a",
        variant=0,
        stage=ReceiptState.RESERVED,
        held_for=held_for,
        at_the_id=at_the_id,
    )
    return machine


def test_a_retry_takes_over_a_reservation_whose_hold_ends_at_this_very_instant(
    submission_world: SubmissionWorld,
) -> None:
    # Found by the machine: a_writer_died_midway(held_for=0.0, stage=reserved,
    # at_the_id="absent") then submit(the same request). The reader counted the hold as over
    # (held_until > now is false) while the takeover counted it as live (held_until < now is
    # false too), so the call re-read the receipt forever while the clock stood still.
    machine = died_holding_a_reservation(submission_world, held_for=0.0, at_the_id="absent")
    identity = machine.known[("acme", "sub-a")].identity
    assert identity is not None
    task_id = identity[0]

    machine.submit(tenant="acme", sid="sub-a", variant=0, kill=None, response_lost=False)

    assert machine.known[("acme", "sub-a")].named == {task_id}
    assert submission_world.reads.count <= 2
    machine.a_submission_names_one_task()


def test_a_retry_never_adopts_another_submissions_task_at_the_preallocated_id(
    submission_world: SubmissionWorld,
) -> None:
    machine = died_holding_a_reservation(submission_world, held_for=-30.0, at_the_id="foreign")
    machine.a_submission_names_one_task()

    machine.submit(tenant="acme", sid="sub-a", variant=0, kill=None, response_lost=False)

    machine.a_submission_names_one_task()
