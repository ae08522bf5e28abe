"""Concurrent write_task callers with one submission id converge on one TASK.

Threads are lined up behind a barrier; separate OS processes behind a start signal on stdin
(each connected and ready first). Every run must end with exactly one ``created``, the rest
``reused`` with the same task_id, one TASK and one receipt, on SQLite and on Postgres: the
others wait on the database for the first commit (the unique key), then read its committed
receipt.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import event, text

from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.model import ConflictCode, Disposition, WriteTaskResult
from surehand.store import Store
from tests.skips import not_applicable
from tests.submission_helpers import (
    TENANT,
    child_result,
    counts,
    request,
    run_child,
    run_children_at_once,
)

SID = "race-1"
ORIGINAL = request(client_submission_id=SID)
OTHER = request(client_submission_id=SID, subject="Deploy staging", recipient="OPS")


def call_at_once(services: Services, requests: list[dict[str, Any]]) -> list[WriteTaskResult]:
    """One thread per request, released together by a barrier."""
    barrier = threading.Barrier(len(requests))

    def call(data: dict[str, Any]) -> WriteTaskResult:
        barrier.wait()
        return write_task(services, data, tenant=TENANT)

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(call, requests))


def tally(dispositions: list[str]) -> dict[str, int]:
    return dict(Counter(dispositions))


@pytest.mark.parametrize("callers", [8, 64])
def test_concurrent_threads_with_one_id_and_one_request_create_one_task(
    services: Services, callers: int
) -> None:
    results = call_at_once(services, [ORIGINAL] * callers)

    assert tally([r.disposition.value for r in results]) == {"created": 1, "reused": callers - 1}
    assert len({r.task_id for r in results}) == 1
    assert len({r.task_path for r in results}) == 1
    assert sum(r.action_taken for r in results) == 1
    assert counts(services.store) == (1, 1)


def test_concurrent_threads_with_one_id_and_two_requests_create_one_task(
    services: Services,
) -> None:
    requests = [ORIGINAL, OTHER] * 4

    results = call_at_once(services, requests)

    created = [r for r in results if r.disposition is Disposition.CREATED]
    assert len(created) == 1
    winner = created[0]
    for data, result in zip(requests, results, strict=True):
        assert result.task_id == winner.task_id
        if result is winner:
            continue
        if result.request_digest == winner.request_digest:
            assert result.disposition is Disposition.REUSED, data
        else:
            assert result.disposition is Disposition.CONFLICT, data
            assert result.conflict is not None
            assert result.conflict.code is ConflictCode.DIGEST_MISMATCH
    assert tally([r.disposition.value for r in results]) == {
        "created": 1,
        "reused": 3,
        "conflict": 4,
    }
    assert counts(services.store) == (1, 1)


def test_concurrent_processes_with_one_id_create_one_task(store: Store) -> None:
    results = run_children_at_once(8, store.url, SID, [ORIGINAL])

    assert tally([r["disposition"] for r in results]) == {"created": 1, "reused": 7}
    assert len({r["task_id"] for r in results}) == 1
    assert counts(store) == (1, 1)


def test_concurrent_processes_with_two_requests_create_one_task(store: Store) -> None:
    results = run_children_at_once(8, store.url, SID, [ORIGINAL, OTHER])

    assert Counter(r["disposition"] for r in results)["created"] == 1
    assert len({r["task_id"] for r in results}) == 1
    conflicts = [r["conflict"]["code"] for r in results if r["disposition"] == "conflict"]
    assert conflicts == ["digest_mismatch"] * 4
    assert counts(store) == (1, 1)


def test_a_fresh_process_reuses_the_result_committed_by_another(services: Services) -> None:
    url = services.store.url
    first = child_result(run_child(url, SID, ORIGINAL))
    assert first["disposition"] == "created"

    after_restart = child_result(run_child(url, SID, ORIGINAL))
    in_this_process = write_task(services, ORIGINAL, tenant=TENANT)

    assert after_restart["disposition"] == "reused"
    assert after_restart["action_taken"] is False
    assert after_restart["task_id"] == first["task_id"] == in_this_process.task_id
    assert after_restart["task_path"] == first["task_path"]
    assert in_this_process.disposition is Disposition.REUSED
    assert counts(services.store) == (1, 1)


def test_a_retry_answers_while_creators_hold_the_task_counter(services: Services) -> None:
    """Postgres: the read that starts every write_task also allocates the TASK number when
    there is no receipt; with a receipt it neither updates nor locks the counter row, so a
    retry answers at once even while a creator holds that row."""
    if services.store.dialect != "postgresql":
        not_applicable("SQLite serialises writers; the counter is allocated inside the create")
    first = write_task(services, request(client_submission_id="held-1"), tenant=TENANT)
    again = request(client_submission_id="held-1")
    with ThreadPoolExecutor(1) as pool, services.store.engine.connect() as creator:
        # A creator in the middle of its transaction holds the counter row.
        creator.execute(text("SELECT last FROM counters WHERE kind = 'TASK' FOR UPDATE")).all()
        try:
            retry = pool.submit(write_task, services, again, tenant=TENANT)
            reused = retry.result(timeout=30)  # waiting on the row lock would never end
        finally:
            creator.rollback()  # before the pool joins its thread, whatever happened

    assert reused.disposition is Disposition.REUSED
    assert reused.task_id == first.task_id


def test_concurrent_creates_keep_reusing_the_pooled_connections(services: Services) -> None:
    """Postgres: eight threads creating TASKs open at most eight connections on each engine
    of the store and keep them: a pool that closed its overflow on return made every create
    beyond the pool's size fork a new Postgres backend (and cost more than the create)."""
    if services.store.dialect != "postgresql":
        not_applicable("SQLite connections are in-process files, not server backends")
    store = services.store
    engines = [store.engine, store.one_statement_engine, store._async_commit_engine]
    opened: Counter[int] = Counter()

    def on_connect(*_args: Any, engine_index: int) -> None:
        opened[engine_index] += 1

    listeners = [functools.partial(on_connect, engine_index=i) for i in range(len(engines))]
    for engine, listener in zip(engines, listeners, strict=True):
        event.listen(engine, "connect", listener)
    try:
        with ThreadPoolExecutor(8) as pool:
            ids = [f"pooled-{n}" for n in range(160)]
            results = list(
                pool.map(
                    lambda sid: write_task(
                        services, request(client_submission_id=sid), tenant=TENANT
                    ),
                    ids,
                )
            )
    finally:
        for engine, listener in zip(engines, listeners, strict=True):
            event.remove(engine, "connect", listener)

    assert all(r.disposition is Disposition.CREATED for r in results)
    assert all(count <= 8 for count in opened.values()), opened
