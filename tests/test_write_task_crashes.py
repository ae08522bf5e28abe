"""A write_task caller killed (SIGKILL) at each commit boundary is recovered by a retry under
the original identity: one TASK, and a recovered reservation keeps its preallocated task_id.

Each test runs the first call in a child process with ``SUREHAND_CRASH_AT`` naming a crash
point (``surehand/crashpoints.py``) and a short hold, on a SQLite file and on the per-worker
Postgres database (the ``store`` fixture's URL, which is ``pg_url`` for Postgres). The retry
runs in this process on the real clock and waits out the dead caller's hold by itself.
"""

from __future__ import annotations

import signal
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from surehand.config import Settings
from surehand.digest import request_digest
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.model import DIGEST_SCHEMA_VERSION, Disposition, Receipt, ReceiptState
from surehand.requests import parse_task_request
from surehand.store import Store, receipts
from tests.submission_helpers import TENANT, child_env, counter_rows, counts, request, run_child

pytestmark = pytest.mark.slow

SID = "crash-1"
ORIGINAL = request(client_submission_id=SID)
HOLD_SECONDS = "0.3"


def crash_at(store: Store, point: str) -> subprocess.CompletedProcess[str]:
    """Run the first call in a child that SIGKILLs itself at ``write_task.<point>``."""
    env = child_env(
        SUREHAND_CRASH_AT=f"write_task.{point}", SUREHAND_SUBMISSION_HOLD_SECONDS=HOLD_SECONDS
    )
    return run_child(store.url, SID, ORIGINAL, env=env)


def stored_receipt(store: Store) -> Receipt:
    with store.snapshot() as connection:
        receipt = receipts.get(connection, TENANT, SID)
    assert receipt is not None
    return receipt


def retry(store: Store) -> Services:
    """Services for the retrying caller: the real clock, and time enough to outwait a hold."""
    return Services(store=store, settings=Settings(submission_wait_seconds=20.0))


def assert_killed(completed: subprocess.CompletedProcess[str]) -> None:
    assert completed.returncode == -signal.SIGKILL, (completed.returncode, completed.stderr)
    assert completed.stdout == ""  # it never got to print a result


def test_a_caller_killed_before_its_commit_leaves_nothing_and_a_retry_creates_once(
    store: Store,
) -> None:
    counters_before = counter_rows(store)
    assert_killed(crash_at(store, "before_commit"))
    # Receipt and TASK share one transaction: the kill rolled both back. (On Postgres the
    # number was allocated ahead in its own transaction: it is skipped, never reused.)
    assert counts(store) == (0, 0)
    if store.dialect == "sqlite":
        assert counter_rows(store) == counters_before

    result = write_task(retry(store), ORIGINAL, tenant=TENANT)

    assert result.disposition is Disposition.CREATED
    assert counts(store) == (1, 1)
    assert stored_receipt(store).state is ReceiptState.COMMITTED
    again = write_task(retry(store), ORIGINAL, tenant=TENANT)
    assert (again.disposition, again.task_id) == (Disposition.REUSED, result.task_id)


def test_a_caller_killed_after_committing_is_answered_with_its_result(store: Store) -> None:
    assert_killed(crash_at(store, "after_commit"))
    committed = stored_receipt(store)
    assert committed.state is ReceiptState.COMMITTED
    assert counts(store) == (1, 1)

    result = write_task(retry(store), ORIGINAL, tenant=TENANT)

    assert result.disposition is Disposition.REUSED
    assert result.action_taken is False
    assert (result.task_id, result.task_path) == (committed.task_id, committed.task_path)
    assert counts(store) == (1, 1)


def seed_reserved(store: Store) -> Receipt:
    """A reservation whose writer died before creating the TASK, its hold long expired."""
    past = datetime.now(UTC) - timedelta(hours=1)
    with store.transaction() as connection:
        receipts.insert_reserved(
            connection,
            tenant=TENANT,
            submission_id=SID,
            schema_version=DIGEST_SCHEMA_VERSION,
            digest=request_digest(parse_task_request(ORIGINAL).to_fields()),
            task_id="TASK-20261130-042",
            task_path="fcop/_lifecycle/inbox/TASK-20261130-042-PM-to-DEV.md",
            holder="dead-writer",
            held_until=past,
            now=past,
        )
    return stored_receipt(store)


def test_a_recovery_that_is_itself_killed_is_continued_by_the_next_retry(store: Store) -> None:
    reserved = seed_reserved(store)
    # The first retry takes the expired reservation over and dies inside its create.
    assert_killed(crash_at(store, "before_commit"))
    after_kill = stored_receipt(store)
    assert after_kill.state is ReceiptState.RESERVED
    assert after_kill.holder != reserved.holder
    assert counts(store) == (0, 1)
    counters_before = counter_rows(store)

    result = write_task(retry(store), ORIGINAL, tenant=TENANT)

    assert result.disposition is Disposition.CREATED
    assert (result.task_id, result.task_path) == (reserved.task_id, reserved.task_path)
    assert counter_rows(store) == counters_before  # never a new number
    assert counts(store) == (1, 1)
    again = write_task(retry(store), ORIGINAL, tenant=TENANT)
    assert again.disposition is Disposition.REUSED
    assert again.task_id == reserved.task_id
