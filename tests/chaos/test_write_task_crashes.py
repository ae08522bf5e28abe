"""A write_task caller killed (SIGKILL) at each boundary that remains is answered by a retry
with one TASK: before the commit nothing was written and the retry creates it; after the
commit (the answer and the publish not yet given) the retry is answered from the committed
receipt and the TASK's publish waits in the outbox.

Each test runs the first call in a child process with ``SUREHAND_CRASH_AT`` naming a crash
point (``surehand/crashpoints.py``), on a SQLite file and on the per-worker Postgres database
(the ``store`` fixture's URL, which is ``pg_url`` for Postgres). The retry runs in this
process. A receipt is written ``committed`` with its TASK in one transaction (one statement on
Postgres), so these two points are every window a kill can hit.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from surehand.config import Settings
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.model import Disposition, Receipt, ReceiptState
from surehand.store import Store, outbox, receipts, tasks
from tests.submission_helpers import TENANT, child_env, counter_rows, counts, request, run_child

pytestmark = pytest.mark.slow

SID = "crash-1"
ORIGINAL = request(client_submission_id=SID)


def crash_at(store: Store, point: str) -> subprocess.CompletedProcess[str]:
    """Run the first call in a child that SIGKILLs itself at ``write_task.<point>``."""
    env = child_env(SUREHAND_CRASH_AT=f"write_task.{point}")
    return run_child(store.url, SID, ORIGINAL, env=env)


def stored_receipt(store: Store) -> Receipt:
    with store.snapshot() as connection:
        receipt = receipts.get(connection, TENANT, SID)
    assert receipt is not None
    return receipt


def retry(store: Store) -> Services:
    """Services for the retrying caller: the real clock, no publisher (the outbox keeps what
    it owes)."""
    return Services(store=store, settings=Settings())


def pending(store: Store) -> int:
    with store.snapshot() as connection:
        return outbox.pending(connection)


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
    assert pending(store) == 0
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
    # Killed before the publish: the TASK is committed unpublished, its outbox row waiting
    # for the next drain or the sweep (tests/store/test_outbox.py drains it).
    with store.snapshot() as connection:
        task = tasks.get(connection, committed.task_id)
    assert task is not None
    assert not task.published
    assert pending(store) == 1

    result = write_task(retry(store), ORIGINAL, tenant=TENANT)

    assert result.disposition is Disposition.REUSED
    assert result.action_taken is False
    assert (result.task_id, result.task_path) == (committed.task_id, committed.task_path)
    assert counts(store) == (1, 1)
