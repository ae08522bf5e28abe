"""write_task on each store backend: reuse after a lost response, typed conflicts that change
nothing, tenant scoping, the legacy path, task numbers, and the replay of a committed receipt.

A receipt is only ever written ``committed``, with its TASK; the replay tests seed one directly
(the way Stripe-style recovery points are tested) and retry against it.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from surehand.digest import sha256_hex
from surehand.dispatcher import diagnostics
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.errors import StoreError
from surehand.model import (
    Bucket,
    ConflictCode,
    Disposition,
    Receipt,
    ReceiptState,
    WriteTaskResult,
)
from surehand.store import creation, receipts, tasks
from surehand.testing import ManualClock
from tests.session_helpers import read_task
from tests.submission_helpers import (
    TENANT,
    counter_rows,
    counts,
    digest_of,
    move_bucket,
    receipt_row,
    request,
    seed_counter,
    seed_receipt,
    seed_task,
    shown_id,
    task_ids,
)

SID = "sub-1"
ORIGINAL = request(client_submission_id=SID)
CHANGED = request(client_submission_id=SID, subject="Fix logout")
DAY = "20261130"  # the ManualClock's default start is 2026-11-30 09:00 UTC
PREALLOCATED = f"TASK-{DAY}-001"


def submit(services: Services, data: dict[str, object], tenant: str = TENANT) -> WriteTaskResult:
    return write_task(services, data, tenant=tenant)


def stored_receipt(services: Services, submission_id: str = SID) -> Receipt:
    with services.store.snapshot() as connection:
        receipt = receipts.get(connection, TENANT, submission_id)
    assert receipt is not None
    return receipt


def assert_conflict(result: WriteTaskResult, code: ConflictCode) -> None:
    assert result.disposition is Disposition.CONFLICT
    assert result.action_taken is False
    assert result.conflict is not None
    assert result.conflict.code is code
    assert result.conflict.message


# -- retries ----------------------------------------------------------------------------------


def test_a_retry_after_a_lost_response_reuses_the_first_result(services: Services) -> None:
    first = submit(services, ORIGINAL)  # committed, but say the response never arrived
    assert first.disposition is Disposition.CREATED
    assert first.action_taken is True
    assert first.receipt_state is ReceiptState.COMMITTED
    assert first.idempotent is True
    assert first.task_id == shown_id(services.store, DAY, 1)

    retry = submit(services, ORIGINAL)

    assert retry.disposition is Disposition.REUSED
    assert retry.action_taken is False
    assert (retry.task_id, retry.task_path) == (first.task_id, first.task_path)
    assert retry.request_digest == first.request_digest == digest_of(ORIGINAL)
    assert retry.digest_schema_version == "write-task-v1"
    assert retry.receipt_state is ReceiptState.COMMITTED
    assert retry.conflict is None
    assert counts(services.store) == (1, 1)


def test_a_retry_returns_the_first_result_even_after_the_task_moved_bucket(
    services: Services, clock: ManualClock
) -> None:
    first = submit(services, ORIGINAL)
    assert first.task_id is not None
    move_bucket(services.store, first.task_id, Bucket.ACTIVE, clock.now())

    retry = submit(services, ORIGINAL)

    assert retry.disposition is Disposition.REUSED
    assert retry.task_id == first.task_id
    assert retry.task_path == first.task_path
    assert retry.task_path is not None
    assert "/inbox/" in retry.task_path
    assert counts(services.store) == (1, 1)


def test_the_same_id_with_a_different_request_is_a_digest_mismatch_that_changes_nothing(
    services: Services,
) -> None:
    first = submit(services, ORIGINAL)
    receipt_before = receipt_row(services.store, TENANT, SID)
    counters_before = counter_rows(services.store)

    conflict = submit(services, CHANGED)

    assert_conflict(conflict, ConflictCode.DIGEST_MISMATCH)
    assert conflict.request_digest == digest_of(CHANGED) != first.request_digest
    assert counts(services.store) == (1, 1)
    assert receipt_row(services.store, TENANT, SID) == receipt_before
    assert counter_rows(services.store) == counters_before

    again = submit(services, ORIGINAL)
    assert again.disposition is Disposition.REUSED
    assert again.task_id == first.task_id
    assert counts(services.store) == (1, 1)


def test_a_receipt_from_another_digest_schema_is_a_schema_mismatch(
    services: Services, clock: ManualClock
) -> None:
    seed_counter(services.store, DAY, 1)
    seed_task(
        services.store, task_id=PREALLOCATED, data=ORIGINAL, submission_id=SID, now=clock.now()
    )
    seed_receipt(
        services.store,
        submission_id=SID,
        data=ORIGINAL,
        task_id=PREALLOCATED,
        created_at=clock.now(),
        schema_version="write-task-v0",
    )
    receipt_before = receipt_row(services.store, TENANT, SID)

    result = submit(services, ORIGINAL)
    # The schema is checked first: a request that differs too is still a schema mismatch.
    changed = submit(services, CHANGED)

    assert_conflict(result, ConflictCode.SCHEMA_MISMATCH)
    assert_conflict(changed, ConflictCode.SCHEMA_MISMATCH)
    assert (result.task_id, result.receipt_state) == (PREALLOCATED, ReceiptState.COMMITTED)
    assert counts(services.store) == (1, 1)
    assert receipt_row(services.store, TENANT, SID) == receipt_before


# -- tenants and the legacy path --------------------------------------------------------------


def test_submission_ids_are_scoped_per_tenant(services: Services) -> None:
    acme = submit(services, ORIGINAL, tenant="acme")
    globex = submit(services, ORIGINAL, tenant="globex")
    # Another tenant may even use the id for another request: no conflict leaks across.
    initech = submit(services, CHANGED, tenant="initech")

    assert [r.disposition for r in (acme, globex, initech)] == [Disposition.CREATED] * 3
    assert len({acme.task_id, globex.task_id, initech.task_id}) == 3
    assert counts(services.store) == (3, 3)

    assert submit(services, ORIGINAL, tenant="acme").task_id == acme.task_id
    assert submit(services, ORIGINAL, tenant="globex").task_id == globex.task_id
    assert submit(services, CHANGED, tenant="initech").task_id == initech.task_id
    assert counts(services.store) == (3, 3)
    with services.store.snapshot() as connection:
        assert tasks.count(connection, tenant="acme") == 1
        assert tasks.count(connection, tenant="globex") == 1


def test_a_call_without_an_id_takes_the_legacy_path_with_no_retry_guarantee(
    services: Services,
) -> None:
    first = submit(services, request())
    second = submit(services, request())

    for result in (first, second):
        assert result.disposition is Disposition.CREATED
        assert result.action_taken is True
        assert result.idempotent is False
        assert result.receipt_state is None
        assert result.client_submission_id is None
        assert result.request_digest == digest_of(request())
    assert first.task_id != second.task_id
    assert counts(services.store) == (2, 0)
    assert first.to_dict()["idempotent"] is False


# -- task numbers -----------------------------------------------------------------------------


def test_task_numbers_follow_the_utc_date_of_the_clock_and_restart_each_day(
    services: Services, clock: ManualClock
) -> None:
    clock.set(datetime(2026, 11, 30, 23, 59, 59, 900_000, tzinfo=UTC))
    before_midnight = [submit(services, request(client_submission_id=f"s{i}")) for i in (1, 2)]
    clock.advance(0.2)  # 2026-12-01 00:00:00.1 UTC
    after_midnight = submit(services, request(client_submission_id="s3"))
    legacy = submit(services, request())
    clock.set(datetime(2026, 11, 30, 23, 59, 59, 950_000, tzinfo=UTC))  # the clock steps back
    late = submit(services, request(client_submission_id="s4"))

    store = services.store
    shown = [shown_id(store, "20261130", 1), shown_id(store, "20261130", 2)]
    assert [r.task_id for r in before_midnight] == shown
    assert after_midnight.task_id == shown_id(store, "20261201", 1)
    assert legacy.task_id == shown_id(store, "20261201", 2)
    # The day's counter continues: never reused.
    assert late.task_id == shown_id(store, "20261130", 3)
    assert len(set(task_ids(services.store))) == 5
    assert counts(services.store) == (5, 4)
    assert counter_rows(services.store) == [("TASK", "20261130", 3), ("TASK", "20261201", 2)]


class _TickingClock(ManualClock):
    """Moves forward by ``step`` seconds each time it is read."""

    def __init__(self, start: datetime, step: float) -> None:
        super().__init__(start)
        self.step = step

    def now(self) -> datetime:
        return self.advance(self.step)


def test_a_create_that_spans_midnight_takes_its_number_and_its_id_from_one_day(
    services: Services,
) -> None:
    """The clock is read once per create: a number allocated for one day never gets the next
    day's date in its id (where that day's counter would hand the same id out again)."""
    midnight = datetime(2026, 12, 1, tzinfo=UTC)
    ticking = _TickingClock(midnight - timedelta(milliseconds=3), step=0.002)

    spanning = submit(dataclasses.replace(services, clock=ticking), ORIGINAL)
    later = ManualClock(midnight + timedelta(hours=1))
    next_day = submit(dataclasses.replace(services, clock=later), request(client_submission_id="b"))

    assert spanning.task_id is not None
    created_at = read_task(services.store, spanning.task_id).created_at
    assert spanning.task_id == shown_id(services.store, f"{created_at:%Y%m%d}", 1)
    assert next_day.task_id == shown_id(services.store, "20261201", 1) != spanning.task_id
    assert len(set(task_ids(services.store))) == 2


def test_task_numbers_are_padded_to_three_digits_and_grow_past_999(services: Services) -> None:
    first = submit(services, request(client_submission_id="n1"))
    seed_counter(services.store, DAY, 998)  # the day keeps its key
    nine_nine_nine = submit(services, request(client_submission_id="n999"))
    thousandth = submit(services, request(client_submission_id="n1000"))

    assert first.task_id == shown_id(services.store, DAY, 1)
    assert nine_nine_nine.task_id == shown_id(services.store, DAY, 999)
    assert thousandth.task_id == shown_id(services.store, DAY, 1000)
    assert [len(r.task_id or "") for r in (first, nine_nine_nine, thousandth)] == [17, 17, 18]
    number = (thousandth.task_id or "").rsplit("-", 1)[1]
    assert thousandth.task_path == f"fcop/_lifecycle/inbox/TASK-{DAY}-{number}-PM-to-DEV.md"
    # The 4-digit id is still a valid reference for later requests.
    later = request(depends_on=[thousandth.task_id], parent=nine_nine_nine.task_id)
    assert submit(services, later).task_id == shown_id(services.store, DAY, 1001)
    assert counts(services.store) == (4, 3)


def test_a_conflict_or_a_reuse_consumes_no_task_number(services: Services) -> None:
    first = submit(services, ORIGINAL)
    assert submit(services, CHANGED).disposition is Disposition.CONFLICT
    assert submit(services, ORIGINAL).disposition is Disposition.REUSED
    second = submit(services, request(client_submission_id="sub-2"))

    shown = (shown_id(services.store, DAY, 1), shown_id(services.store, DAY, 2))
    assert (first.task_id, second.task_id) == shown
    assert counter_rows(services.store) == [("TASK", DAY, 2)]
    assert counts(services.store) == (2, 2)


# -- the replay of a committed receipt (seeded) ----------------------------------------------


def test_a_retry_answers_from_a_seeded_committed_receipt_under_its_identity(
    services: Services, clock: ManualClock
) -> None:
    """A receipt committed by another process (or converted by migration 0019): the retry is
    answered from it alone, under the identity it holds, and writes nothing."""
    seed_counter(services.store, DAY, 1)
    document_digest = seed_task(
        services.store, task_id=PREALLOCATED, data=ORIGINAL, submission_id=SID, now=clock.now()
    )
    first = seed_receipt(
        services.store,
        submission_id=SID,
        data=ORIGINAL,
        task_id=PREALLOCATED,
        created_at=clock.now() - timedelta(seconds=60),
        document_digest=document_digest,
    )
    receipt_before = receipt_row(services.store, TENANT, SID)
    counters_before = counter_rows(services.store)

    result = submit(services, ORIGINAL)

    assert result.disposition is Disposition.REUSED
    assert result.action_taken is False
    assert (result.task_id, result.task_path) == (PREALLOCATED, first["task_path"])
    assert result.request_digest == first["request_digest"]
    assert result.receipt_state is ReceiptState.COMMITTED
    assert result.conflict is None
    assert counts(services.store) == (1, 1)
    assert counter_rows(services.store) == counters_before  # no new number allocated
    assert receipt_row(services.store, TENANT, SID) == receipt_before
    assert stored_receipt(services).document_digest == document_digest
    assert_conflict(submit(services, CHANGED), ConflictCode.DIGEST_MISMATCH)
    assert receipt_row(services.store, TENANT, SID) == receipt_before


def test_every_create_writes_its_receipt_committed_with_the_result_and_document_digest(
    services: Services,
) -> None:
    result = submit(services, ORIGINAL)

    receipt = stored_receipt(services)
    assert receipt.state is ReceiptState.COMMITTED
    assert receipt.result == result.to_dict()
    assert (receipt.task_id, receipt.task_path) == (result.task_id, result.task_path)
    assert result.task_id is not None
    document = task_row_document(services, result.task_id)
    assert document is not None
    assert receipt.document_digest == sha256_hex(document)


def task_row_document(services: Services, task_id: str) -> str | None:
    with services.store.snapshot() as connection:
        return tasks.document(connection, task_id)


# -- diagnostics ------------------------------------------------------------------------------


def test_diagnostics_report_a_receipt_whose_task_is_missing_and_never_change_it(
    services: Services, clock: ManualClock
) -> None:
    seed_counter(services.store, DAY, 1)
    seed_receipt(
        services.store,
        submission_id=SID,
        data=ORIGINAL,
        task_id=PREALLOCATED,
        created_at=clock.now() - timedelta(hours=1),
    )
    receipt_before = receipt_row(services.store, TENANT, SID)

    for _ in range(25):
        diagnosis = diagnostics.diagnose_submission(services, TENANT, SID)

    assert diagnosis.state is ReceiptState.COMMITTED
    assert diagnosis.task_id == PREALLOCATED
    assert diagnosis.target_exists is False
    assert diagnosis.digests_match is None
    assert diagnosis.age_seconds == 3600.0
    assert receipt_row(services.store, TENANT, SID) == receipt_before
    assert counts(services.store) == (0, 1)
    assert counter_rows(services.store) == [("TASK", DAY, 1)]


def test_a_counter_behind_the_data_is_a_typed_error_not_a_spin(
    services: Services, clock: ManualClock
) -> None:
    # Another submission holds TASK-...-001 but the counter was never advanced (say, restored
    # from an older backup of a day counted before 0008, so shown as counted): the reserve
    # keeps colliding on the task number.
    seed_counter(services.store, DAY, 0)
    seed_receipt(
        services.store,
        submission_id="older",
        data=ORIGINAL,
        task_id=PREALLOCATED,
        created_at=clock.now(),
    )

    if services.store.dialect == "postgresql":
        # Numbers are allocated ahead, in their own transaction: a taken one is skipped,
        # never reused.
        result = submit(services, request(client_submission_id="newer"))
        assert result.disposition is Disposition.CREATED
        assert result.task_id != PREALLOCATED
        assert counts(services.store) == (1, 2)
        return
    with pytest.raises(StoreError, match="counter"):
        submit(services, request(client_submission_id="newer"))

    assert counts(services.store) == (0, 1)
    assert counter_rows(services.store) == [("TASK", DAY, 0)]


def test_diagnostics_of_a_committed_submission_show_a_healthy_receipt(
    services: Services, clock: ManualClock
) -> None:
    first = submit(services, ORIGINAL)
    clock.advance(3600)

    diagnosis = diagnostics.diagnose_submission(services, TENANT, SID)

    assert diagnosis.state is ReceiptState.COMMITTED
    assert diagnosis.task_id == first.task_id
    assert (diagnosis.target_exists, diagnosis.digests_match) == (True, True)
    assert diagnosis.age_seconds == 3600.0
    assert counts(services.store) == (1, 1)


def test_the_one_statement_create_refuses_rows_that_disagree_on_a_shared_column() -> None:
    """On Postgres the receipt, the TASK and its event take their shared columns (task id,
    tenant, submission id, digests, timestamps) from one parameter each; rows that disagree
    would silently store the TASK's values, so building the parameters refuses them."""
    now = datetime.now(UTC)
    task = {
        "task_id": "TASK-20260101-001",
        "tenant": "t",
        "client_submission_id": "s",
        "request_digest": "d",
        "digest_schema_version": "v",
        "document_digest": "x",
        "created_at": now,
        "updated_at": now,
    }
    event = {"task_id": "TASK-20260101-001", "at": now, "kind": "transition"}
    assert creation.postgres_parameters(dict(task), task, event)["c_now"] == now
    with pytest.raises(ValueError, match="task_id"):
        creation.postgres_parameters({**task, "task_id": "TASK-20260101-002"}, task, event)
    with pytest.raises(ValueError, match="at"):
        creation.postgres_parameters(task, task, {**event, "at": now + timedelta(seconds=1)})
