"""write_report: routing rules, CodeFlowMu dedupe and revisions, validation, and races."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from sqlalchemy import select

from surehand.dispatcher import lifecycle, reports, submissions, transitions
from surehand.dispatcher.context import Services
from surehand.errors import Conflict, ReportRejected, TaskNotFound, ValidationFailed
from surehand.model import SYSTEM, Action, Bucket, EventKind, Report, WriteReportResult
from surehand.requests import MAX_BODY_BYTES, parse_report_request
from surehand.store import events, schema, tasks
from surehand.store import reports as report_rows


def active_task(services: Services, sender: str = "PM", recipient: str = "DEV") -> str:
    """A new TASK, claimed by its recipient (so it is ``active`` and may be reported on)."""
    request = {"sender": sender, "recipient": recipient, "subject": "Ship it", "body": "Go."}
    task_id = submissions.write_task(services, request, tenant="t1").task_id
    assert task_id is not None
    transitions.transition(services, task_id, Action.CLAIM, actor=recipient, tenant="t1")
    return task_id


def write(services: Services, task_id: str, body: str = "Done.", **extra: Any) -> WriteReportResult:
    request = {"task_id": task_id, "reporter": "DEV", "body": body, **extra}
    return reports.write_report(services, request, tenant="t1")


def counts(services: Services, task_id: str) -> tuple[int, int]:
    """(REPORT rows, REPORT events) on a TASK."""
    with services.store.snapshot() as connection:
        rows = report_rows.count(connection, task_id)
        logged = events.count(connection, task_id, EventKind.REPORT)
    return rows, logged


def stored(services: Services, task_id: str) -> list[Report]:
    with services.store.snapshot() as connection:
        return report_rows.for_task(connection, task_id)


# -- a first REPORT -------------------------------------------------------------------------


def test_a_first_report_is_revision_one_with_its_own_number(services: Services) -> None:
    task_id = active_task(services)
    result = write(services, task_id)
    report = result.report
    assert not result.deduplicated
    # Its own counter (permuted: the number reveals no volume), dated like the TASK.
    assert re.fullmatch(r"REPORT-20261130-[0-9]{3}", report.report_id)
    assert (report.reporter, report.recipient, report.revision, report.supersedes) == (
        "DEV",
        "PM",
        1,
        None,
    )
    assert report.body_hash == reports.body_hash("Done.")
    assert stored(services, task_id) == [report]
    assert counts(services, task_id) == (1, 1)


def test_a_report_event_names_the_report(services: Services) -> None:
    task_id = active_task(services)
    report = write(services, task_id).report
    with services.store.snapshot() as connection:
        (event,) = events.history(connection, task_id, EventKind.REPORT)
    assert (event.by, event.data["report_id"], event.data["revision"]) == (
        "DEV",
        report.report_id,
        1,
    )


def test_the_body_hash_ignores_line_endings_and_surrounding_space() -> None:
    assert reports.body_hash("a\r\nb\n  ") == reports.body_hash("a\nb")


# -- dedupe and revisions -------------------------------------------------------------------


def test_the_same_submission_id_is_deduplicated_even_with_another_body(services: Services) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "v1", client_submission_id="sub-1").report
    again = write(services, task_id, "v2", client_submission_id="sub-1")
    assert again.deduplicated
    assert again.report == first
    assert counts(services, task_id) == (1, 1)


def test_the_same_round_and_body_hash_is_deduplicated(services: Services) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "All green.", client_submission_id="sub-1").report
    again = write(services, task_id, "All green.\r\n", client_submission_id="sub-2")
    assert again.deduplicated
    assert again.report == first
    assert counts(services, task_id) == (1, 1)


def test_a_changed_body_makes_revision_two_superseding_revision_one(services: Services) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "draft").report
    second = write(services, task_id, "final")
    assert not second.deduplicated
    assert (second.report.revision, second.report.supersedes) == (2, first.report_id)
    assert second.report.report_id != first.report_id
    assert re.fullmatch(r"REPORT-20261130-[0-9]{3}", second.report.report_id)
    assert counts(services, task_id) == (2, 2)


def test_another_status_starts_its_own_series(services: Services) -> None:
    task_id = active_task(services)
    write(services, task_id, "stuck", status="blocked")
    done = write(services, task_id, "stuck", status="done")
    assert not done.deduplicated
    assert (done.report.revision, done.report.supersedes) == (1, None)


def test_the_same_body_after_a_reject_is_a_new_revision_not_a_duplicate(
    services: Services,
) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "All green.").report
    transitions.transition(services, task_id, Action.SUBMIT, actor="DEV", tenant="t1")
    transitions.transition(
        services, task_id, Action.REJECT, actor="PM", tenant="t1", reason="add tests"
    )
    again = write(services, task_id, "All green.")
    assert not again.deduplicated
    assert (again.report.rework_round, again.report.revision) == (1, 2)
    assert again.report.supersedes == first.report_id


def test_a_retry_after_the_task_moved_on_still_gets_its_first_result(services: Services) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "All green.", client_submission_id="sub-1").report
    transitions.transition(services, task_id, Action.SUBMIT, actor="DEV", tenant="t1")
    again = write(services, task_id, "All green.", client_submission_id="sub-1")
    assert again.deduplicated
    assert again.report == first


# -- routing and state ----------------------------------------------------------------------


def test_only_the_tasks_recipient_may_report(services: Services) -> None:
    task_id = active_task(services)
    with pytest.raises(ReportRejected) as caught:
        reports.write_report(
            services, {"task_id": task_id, "reporter": "QA", "body": "x"}, tenant="t1"
        )
    assert caught.value.details["reason"] == "reporter_mismatch"
    assert counts(services, task_id) == (0, 0)


def test_a_report_goes_to_the_tasks_sender_only(services: Services) -> None:
    task_id = active_task(services)
    with pytest.raises(ReportRejected) as caught:
        write(services, task_id, recipient="ADMIN")
    assert caught.value.details["reason"] == "report_recipient_mismatch"
    assert write(services, task_id, recipient="PM").report.recipient == "PM"


@pytest.mark.parametrize("bucket", [Bucket.INBOX, Bucket.REVIEW])
def test_a_task_that_is_not_active_refuses_a_report(services: Services, bucket: Bucket) -> None:
    task_id = active_task(services)
    if bucket is Bucket.INBOX:
        with services.store.transaction() as connection:
            task = tasks.get_for_update(connection, task_id)
            assert task is not None
            move = lifecycle.Move(Action.ROLLBACK, by=SYSTEM, now=task.updated_at)
            lifecycle.apply(connection, task, move)
    else:
        write(services, task_id, "first")
        transitions.transition(services, task_id, Action.SUBMIT, actor="DEV", tenant="t1")
    before = counts(services, task_id)
    with pytest.raises(ReportRejected) as caught:
        write(services, task_id, "another")
    assert caught.value.details["reason"] == "task_state_disallows_report"
    assert bucket.value in caught.value.message
    assert counts(services, task_id) == before


def test_a_report_on_another_tenants_task_is_not_found(services: Services) -> None:
    task_id = active_task(services)
    with pytest.raises(TaskNotFound):
        reports.write_report(
            services, {"task_id": task_id, "reporter": "DEV", "body": "x"}, tenant="t2"
        )
    assert counts(services, task_id) == (0, 0)


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"body": "x" * (MAX_BODY_BYTES + 1)}, "body"),
        ({"body": "   "}, "body"),
        ({"body": "bad \ud800 surrogate"}, "body"),
        ({"reporter": "dev"}, "reporter"),
        ({"reporter": SYSTEM}, "reporter"),
        ({"status": "finished"}, "status"),
        ({"client_submission_id": "has space"}, "client_submission_id"),
    ],
    ids=["too-large", "blank", "surrogate", "lowercase-role", "system", "status", "sub-id"],
)
def test_a_bad_request_names_the_field_and_writes_nothing(
    services: Services, change: dict[str, str], field: str
) -> None:
    task_id = active_task(services)
    with services.store.snapshot() as connection:
        before = events.count(connection)
    with pytest.raises(ValidationFailed) as caught:
        write(services, task_id, **change)
    assert caught.value.field == field
    with services.store.snapshot() as connection:
        assert (report_rows.count(connection), events.count(connection)) == (0, before)


# -- races ----------------------------------------------------------------------------------


def _in_threads(count: int, work: Any) -> list[Any]:
    """Run ``work(i)`` in ``count`` threads released together; results in index order."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except Exception as error:  # surfaced by the assertions below
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_eight_concurrent_identical_reports_write_one_and_deduplicate_seven(
    services: Services,
) -> None:
    task_id = active_task(services)
    results = _in_threads(8, lambda _: write(services, task_id, "Same.", client_submission_id="s"))
    assert all(isinstance(result, WriteReportResult) for result in results), results
    assert sorted(result.deduplicated for result in results) == [False] + [True] * 7
    assert len({result.report.report_id for result in results}) == 1
    assert counts(services, task_id) == (1, 1)


def test_eight_concurrent_different_reports_all_land_as_distinct_revisions(
    services: Services,
) -> None:
    task_id = active_task(services)
    results = _in_threads(8, lambda i: write(services, task_id, f"Body {i}."))
    assert all(isinstance(result, WriteReportResult) for result in results), results
    assert sorted(result.report.revision for result in results) == list(range(1, 9))
    chain = {r.report.supersedes: r.report.report_id for r in results}
    assert len(chain) == 8  # every revision supersedes a different predecessor
    assert counts(services, task_id) == (8, 8)


def _miss_once(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``report_rows.<name>`` return None on its first call, as if a racing writer's
    REPORT had landed just after this caller looked."""
    real = getattr(report_rows, name)
    calls: list[int] = []

    def lookup(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return None if len(calls) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(report_rows, name, lookup)


def test_a_duplicate_missed_by_the_lookup_is_caught_by_the_constraint_and_deduplicated(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "Same.").report
    _miss_once(monkeypatch, "find_duplicate")
    again = write(services, task_id, "Same.")
    assert again.deduplicated
    assert again.report == first
    assert counts(services, task_id) == (1, 1)


def test_a_revision_race_is_retried_into_the_next_revision(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = active_task(services)
    first = write(services, task_id, "draft").report
    _miss_once(monkeypatch, "latest")
    second = write(services, task_id, "final").report
    assert (second.revision, second.supersedes) == (2, first.report_id)
    assert counts(services, task_id) == (2, 2)


def test_a_race_that_never_settles_gives_up_with_a_retryable_conflict(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = active_task(services)
    write(services, task_id, "draft")
    monkeypatch.setattr(report_rows, "latest", lambda *args, **kwargs: None)
    with pytest.raises(Conflict) as caught:
        write(services, task_id, "final")
    assert caught.value.retryable
    assert counts(services, task_id) == (1, 1)


# -- inside a caller's transaction ----------------------------------------------------------


def test_write_report_in_joins_the_callers_transaction(services: Services) -> None:
    task_id = active_task(services)
    request = parse_report_request({"task_id": task_id, "reporter": "DEV", "body": "Done."})
    with services.store.transaction() as connection:
        task = tasks.get_for_update(connection, task_id)
        assert task is not None
        result = reports.write_report_in(connection, services, task, request, attempt_id="A-1")
    assert result.report.attempt_id == "A-1"
    assert stored(services, task_id) == [result.report]


def test_write_report_in_rolls_back_with_the_caller(services: Services) -> None:
    task_id = active_task(services)
    request = parse_report_request({"task_id": task_id, "reporter": "DEV", "body": "Done."})

    def write_then_fail() -> None:
        with services.store.transaction() as connection:
            task = tasks.get_for_update(connection, task_id)
            assert task is not None
            reports.write_report_in(connection, services, task, request, attempt_id=None)
            raise RuntimeError("the caller's later step failed")

    with pytest.raises(RuntimeError, match="the caller's later step failed"):
        write_then_fail()
    assert counts(services, task_id) == (0, 0)
    written = write(services, task_id).report
    with services.store.snapshot() as connection:
        seq = connection.execute(
            select(schema.reports.c.seq).where(schema.reports.c.report_id == written.report_id)
        ).scalar_one()
    assert seq == 1  # the rolled-back write's number was released, not skipped
