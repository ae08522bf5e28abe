"""The session hot path: the one-statement claim, the return folded into settle when the
attempt has no operations, and the claim's retry on an unreachable store.

Each fast path must leave exactly the rows the general path leaves (lifecycle.apply; for the
settle, ``settling.write_in``, which builds its rows from the same ``Settlement``), and must
keep every guarantee: the claim is one compare-and-set, every write is fenced by epoch, and
the agent's return commits before the REPORT whenever admission would read it (the attempt has
operations).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event, text, update

from surehand.dispatcher import claims as claims_module
from surehand.dispatcher import lifecycle, settling
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.errors import StaleOwner, StoreUnavailable, TaskHeld
from surehand.facade import Surehand
from surehand.model import (
    SYSTEM,
    Action,
    AttemptState,
    Bucket,
    EventKind,
    Fence,
    ReportStatus,
    RetryPolicy,
    Task,
)
from surehand.store import attempts, creation, session_writes, task_moves, tasks
from surehand.store import schema as tables
from surehand.store.driver import DriverStatement
from tests.session_helpers import (
    Harness,
    attempts_of,
    claimed,
    committed_task,
    events_of,
    read_task,
    reports_of,
)
from tests.skips import not_applicable


@contextmanager
def writes(services: Services, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count what makes a write durable on the store's engine while the block runs: commits,
    plus statements run in autocommit (Postgres's one-statement writes commit by themselves,
    through SQLAlchemy or on the driver's cursor). The REPORT number that Postgres allocates
    ahead runs on another engine and is not counted (it commits without waiting for the WAL
    flush; the settle's commit flushes it)."""
    counted = [0]
    engine, autocommit = services.store.engine, services.store.one_statement_engine
    execute = DriverStatement._execute

    def autocommitted(connection: Any) -> None:
        if connection.engine is autocommit and autocommit is not engine:
            counted[0] += 1

    def on_commit(_connection: Any) -> None:
        counted[0] += 1

    def on_execute(connection: Any, *_args: Any) -> None:
        autocommitted(connection)

    def counting_execute(self: DriverStatement, connection: Any, *args: Any) -> Any:
        autocommitted(connection)
        return execute(self, connection, *args)

    monkeypatch.setattr(DriverStatement, "_execute", counting_execute)
    event.listen(engine, "commit", on_commit)
    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield counted
    finally:
        event.remove(engine, "commit", on_commit)
        event.remove(engine, "before_cursor_execute", on_execute)


def _event_shape(services: Services, task_id: str) -> list[tuple[Any, ...]]:
    return [
        (e.kind, e.by, e.action, e.from_bucket, e.to_bucket, e.reason, e.epoch, e.data)
        for e in events_of(services.store, task_id, EventKind.TRANSITION)
    ]


# -- the claim -------------------------------------------------------------------------------


def test_the_fast_claim_writes_what_apply_writes(services: Services) -> None:
    fast_id, slow_id = committed_task(services), committed_task(services)
    now = services.clock.now()
    with services.store.one_write() as connection:
        fast = lifecycle.claim(connection, fast_id, now=now, attempt_id="a-fast", worker="w")
    with services.store.transaction() as connection:
        task = tasks.get_for_update(connection, slow_id)
        assert task is not None
        move = lifecycle.Move(
            Action.CLAIM,
            by=SYSTEM,
            now=now,
            fence=Fence("a-slow", slow_id, task.epoch + 1),
            fencing=lifecycle.Fencing.OPENS,
        )
        slow = lifecycle.apply(connection, task, move)
        attempts.insert(
            connection,
            attempts.new_running(
                attempt_id="a-slow", task_id=slow_id, number=slow.epoch, worker="w", now=now
            ),
        )
    assert fast is not None
    assert fast == read_task(services.store, fast_id)  # returned as written, not re-read
    assert (fast.bucket, fast.epoch, fast.revision) == (slow.bucket, slow.epoch, slow.revision)
    assert (fast.bucket, fast.epoch, fast.revision) == (Bucket.ACTIVE, 1, 2)
    assert fast.updated_at == slow.updated_at == now
    assert _event_shape(services, fast_id) == _event_shape(services, slow_id)
    claimed_event = events_of(services.store, fast_id, EventKind.TRANSITION)[-1]
    assert (claimed_event.action, claimed_event.attempt_id) == ("claim", "a-fast")
    [fast_attempt], [slow_attempt] = (
        attempts_of(services.store, fast_id),
        attempts_of(services.store, slow_id),
    )
    assert replace(fast_attempt, attempt_id="x", task_id="x", lease_id="x") == replace(
        slow_attempt, attempt_id="x", task_id="x", lease_id="x"
    )
    assert fast_attempt.lease_id == "a-fast"


@pytest.mark.parametrize("why", ["held", "active", "missing"])
def test_the_fast_claim_writes_nothing_when_the_task_is_not_an_unheld_inbox_task(
    services: Services, why: str
) -> None:
    task_id = committed_task(services) if why != "missing" else "TASK-20260101-999"
    if why == "active":
        claimed(services, task_id)
    if why == "held":
        _hold(services, task_id)
    before = read_task(services.store, task_id) if why != "missing" else None
    attempts_before = attempts_of(services.store, task_id) if before else []
    with services.store.one_write() as connection:
        moved = lifecycle.claim(
            connection, task_id, now=services.clock.now(), attempt_id="a", worker="w"
        )
    assert moved is None
    if before is not None:
        assert read_task(services.store, task_id) == before
        assert attempts_of(services.store, task_id) == attempts_before


def test_a_claimed_session_holds_the_rows_as_written(services: Services) -> None:
    task_id = committed_task(services)
    session = claim(services, task_id, worker="w", message_id=None)
    assert session is not None
    assert session.task == read_task(services.store, task_id)
    [attempt] = attempts_of(services.store, task_id)
    assert session.attempt == attempt
    assert (attempt.number, attempt.state, attempt.worker) == (1, AttemptState.RUNNING, "w")


# -- the return and the settle ---------------------------------------------------------------


def test_without_operations_the_return_and_settle_commit_together(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = committed_task(services)
    session = claimed(services, task_id)

    with writes(services, monkeypatch) as counted:
        moved = session.settle({"answer": 42}, to_review=True)

    assert counted == [1]
    assert moved == read_task(services.store, task_id)
    assert moved.bucket is Bucket.REVIEW
    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.agent_returned, attempt.result) == (
        AttemptState.SUCCEEDED,
        True,
        {"answer": 42},
    )
    [report] = reports_of(services.store, task_id)
    assert report.attempt_id == attempt.attempt_id
    kinds = [e.kind for e in events_of(services.store, task_id)]
    assert kinds[-3:] == [EventKind.REPORT, EventKind.TRANSITION, EventKind.ATTEMPT_FINISHED]


def test_the_one_write_settle_writes_what_the_general_path_writes(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_id, slow_id = committed_task(services), committed_task(services)
    fast, slow = claimed(services, fast_id), claimed(services, slow_id)

    one_write, applied = session_writes.settle_first_report, []

    def watched(connection: Any, settled: session_writes.FirstReport) -> Task | None:
        moved = one_write(connection, settled)
        applied.append(moved is not None)
        return moved

    monkeypatch.setattr(session_writes, "settle_first_report", watched)
    fast.settle("done", to_review=False)
    assert applied == [True]  # the fast one took the one write
    # A guard that does not hold: the one write writes nothing and the general path settles.
    monkeypatch.setattr(session_writes, "settle_first_report", lambda *_args: None)
    slow.settle("done", to_review=False)

    def shape(task_id: str) -> tuple[Any, ...]:
        task = read_task(services.store, task_id)
        [attempt] = attempts_of(services.store, task_id)
        [report] = reports_of(services.store, task_id)
        history = [
            (
                *(e.kind, e.by, e.action, e.from_bucket, e.to_bucket, e.reason, e.epoch, e.at),
                *(sorted(e.data), e.data.get("revision"), e.data.get("state"), e.data.get("error")),
            )
            for e in events_of(services.store, task_id)
        ]
        return (
            (task.bucket, task.revision, task.epoch),
            (attempt.state, attempt.agent_returned, attempt.result, attempt.error),
            (report.body, report.status, report.revision, report.supersedes, report.body_hash),
            (report.reporter, report.recipient, report.rework_round, report.created_at),
            (report.attempt_id == attempt.attempt_id, task.updated_at, attempt.ended_at),
            history,
        )

    assert shape(fast_id) == shape(slow_id)


def _break_report(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("crashed before the REPORT")

    monkeypatch.setattr(settling, "write_report_in", broken)


def test_with_operations_the_return_commits_before_the_report(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RA-7: once the agent returned, a crash before the REPORT leaves the return recorded,
    so admission writes the REPORT from records instead of running the agent again."""
    task_id = committed_task(services)
    session = claimed(services, task_id)
    run_operation(session, "deploy", {"env": "prod"}, lambda: "ok", **_op())
    _break_report(monkeypatch)

    with pytest.raises(RuntimeError, match="crashed before the REPORT"):
        session.settle("deployed", to_review=True)

    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.agent_returned, attempt.result) == (
        AttemptState.RUNNING,
        True,
        "deployed",
    )
    assert reports_of(services.store, task_id) == []


def test_operations_recorded_by_another_process_also_commit_the_return_first(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``surehand effect`` records operations through a Session of its own: the store, not the
    runner's memory, says whether the attempt has operations."""
    task_id = committed_task(services)
    session = claimed(services, task_id)
    other = Session(services=services, task=session.task, attempt=session.attempt)
    run_operation(other, "notify", {"to": "ops"}, lambda: "sent", **_op())
    _break_report(monkeypatch)

    with pytest.raises(RuntimeError, match="crashed before the REPORT"):
        session.settle("notified", to_review=True)

    [attempt] = attempts_of(services.store, task_id)
    assert attempt.agent_returned is True


def test_without_operations_a_crash_inside_the_settle_leaves_nothing(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without operations admission answers reexecute either way, so nothing is lost by
    rolling the return back with the REPORT. (SQLite: its last statement fails; on Postgres
    the settle is one statement, and the test below checks that it applies all or nothing.)"""
    if services.store.dialect == "postgresql":
        not_applicable("one statement on Postgres: see the concurrent-move test")
    task_id = committed_task(services)
    session = claimed(services, task_id)

    class Broken:
        def rowcount(self, *_args: Any) -> int:
            raise RuntimeError("crashed before the events")

    monkeypatch.setattr(session_writes, "_INSERT_EVENT", Broken())  # the settle's last write

    with pytest.raises(RuntimeError, match="crashed before the events"):
        session.settle("done", to_review=True)

    monkeypatch.undo()
    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.agent_returned) == (AttemptState.RUNNING, False)
    assert reports_of(services.store, task_id) == []
    assert read_task(services.store, task_id).bucket is Bucket.ACTIVE


def test_a_move_committed_while_the_settle_waits_leaves_the_attempt_running(
    services: Services,
) -> None:
    """Postgres: the settle statement locks the TASK row before it fences the attempt, so a
    concurrent move that commits first turns the whole statement into a no-op -- never an
    attempt ended as succeeded beside a TASK that did not move."""
    if services.store.dialect != "postgresql":
        not_applicable("SQLite's write transactions are exclusive: nothing moves in between")
    task_id = committed_task(services)
    session = claimed(services, task_id)
    outcome: list[BaseException | Task] = []
    with services.store.engine.connect() as blocker:
        blocker_pid = blocker.execute(text("SELECT pg_backend_pid()")).scalar_one()
        blocker.execute(  # another writer holds the TASK row and sets a hold
            update(tables.tasks)
            .where(tables.tasks.c.task_id == task_id)
            .values(hold_case_id="CASE-x", hold_reason="held while the settle waited")
        )
        worker = threading.Thread(target=_settle_into, args=(session, outcome))
        worker.start()
        _wait_until_blocked_by(services, task_id, blocker_pid)
        blocker.commit()
    worker.join(30)

    [error] = outcome
    assert isinstance(error, TaskHeld)
    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.agent_returned) == (AttemptState.RUNNING, False)
    assert reports_of(services.store, task_id) == []
    assert read_task(services.store, task_id).bucket is Bucket.ACTIVE


def _settle_into(session: Session, outcome: list[BaseException | Task]) -> None:
    try:
        outcome.append(session.settle("late", to_review=True))
    except BaseException as error:  # handed to the test thread
        outcome.append(error)


def _wait_until_blocked_by(services: Services, task_id: str, blocker_pid: int) -> None:
    """Until a backend of this database waits on a lock the blocker holds (the settle behind
    the blocker's row lock): another run's lock waits on the same server do not count."""
    deadline = time.monotonic() + 10
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND CAST(:blocker AS integer) = ANY(pg_blocking_pids(pid))"
    )
    while time.monotonic() < deadline:
        with services.store.engine.connect() as connection:
            if connection.execute(query, {"blocker": blocker_pid}).scalar_one():
                return
        time.sleep(0.01)
    raise AssertionError(f"the settle of {task_id} never waited for the row lock")


def test_a_series_with_a_report_settles_as_its_next_revision(services: Services) -> None:
    task_id = committed_task(services)
    session = claimed(services, task_id)
    session.report("half way there", ReportStatus.DONE, None)

    moved = session.settle("all done", to_review=True)

    assert moved.bucket is Bucket.REVIEW
    first, second = reports_of(services.store, task_id)
    assert (second.body, second.revision, second.supersedes) == ("all done", 2, first.report_id)
    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.result) == (AttemptState.SUCCEEDED, "all done")


def test_a_held_task_is_not_settled(services: Services) -> None:
    task_id = committed_task(services)
    session = claimed(services, task_id)
    _hold(services, task_id)

    with pytest.raises(TaskHeld):
        session.settle("done", to_review=True)

    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.agent_returned) == (AttemptState.RUNNING, False)
    assert reports_of(services.store, task_id) == []


def _hold(services: Services, task_id: str) -> None:
    with services.store.transaction() as connection:
        assert task_moves.update_if(
            connection,
            task_id,
            expect={},
            values={"hold_case_id": "CASE-x", "hold_reason": "test"},
            now=services.clock.now(),
        )


def test_a_fenced_out_return_is_refused_and_recorded(services: Services) -> None:
    task_id = committed_task(services)
    session = claimed(services, task_id)
    with services.store.transaction() as connection:
        assert attempts.finish(
            connection,
            session.attempt.attempt_id,
            expect=AttemptState.RUNNING,
            state=AttemptState.SESSION_LOST,
            now=services.clock.now(),
        )

    with pytest.raises(StaleOwner):
        session.settle("late", to_review=True)

    [attempt] = attempts_of(services.store, task_id)
    assert (attempt.state, attempt.agent_returned) == (AttemptState.SESSION_LOST, False)
    assert reports_of(services.store, task_id) == []
    [fenced] = events_of(services.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert (fenced.attempt_id, fenced.epoch, fenced.data["write"]) == (
        session.attempt.attempt_id,
        1,
        "record_return",
    )


def _op() -> dict[str, Any]:
    return {"idempotency_key": None, "retry_policy": RetryPolicy.NONE, "probe": None}


# -- the claim's retry -----------------------------------------------------------------------


def test_the_runner_retries_a_claim_once_when_the_store_was_unreachable(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sh: Surehand = harness.surehand()
    sh.registry.register("DEV", lambda ctx: "ok")
    task_id = committed_task(sh)
    real, calls = claims_module.claim, [0]

    def flaky(*args: Any, **kwargs: Any) -> Session | None:
        calls[0] += 1
        if calls[0] == 1:
            raise StoreUnavailable("connection killed by a restart")
        return real(*args, **kwargs)

    monkeypatch.setattr("surehand.dispatcher.runner.claim", flaky)

    assert sh.run_session(task_id).outcome == "settled"
    assert calls == [2]


def test_the_runner_gives_up_after_the_second_unreachable_claim(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    sh: Surehand = harness.surehand()
    task_id = committed_task(sh)

    def down(*args: Any, **kwargs: Any) -> Session | None:
        raise StoreUnavailable("down")

    monkeypatch.setattr("surehand.dispatcher.runner.claim", down)

    with pytest.raises(StoreUnavailable):
        sh.run_session(task_id)
    assert read_task(sh.store, task_id).bucket is Bucket.INBOX


def test_the_one_statement_writes_fit_psycopgs_cache_of_converted_queries() -> None:
    """psycopg converts a query's placeholders on every execution unless the query is short
    enough to cache; the session's two statements and write_task's create must stay within
    its limits."""
    from psycopg import _queries
    from sqlalchemy import create_engine

    dialect = create_engine("postgresql+psycopg://nobody@nowhere/none").dialect  # no connect
    hot = (session_writes._CLAIM_PG, session_writes._SETTLE_PG, creation._POSTGRES)
    for statement in hot:
        compiled = statement._compile(dialect)
        assert len(compiled.sql) <= _queries.MAX_CACHED_STATEMENT_LENGTH
        assert len(compiled.names) <= _queries.MAX_CACHED_STATEMENT_PARAMS
