"""The read side of the service layer: what the doors show, read in one snapshot each.

The doors (the Python handle, HTTP, MCP, the CLI and the console) read through these functions
as they write through the other service calls, so none of them opens a snapshot or knows the
store's modules: a door parses its arguments, calls one of these with its ``Services`` and the
caller's tenant, and renders the frozen records it gets back. A TASK of another tenant is as
missing as one that never existed (TaskNotFound, CaseNotFound), which is what tenants see.
"""

from __future__ import annotations

from surehand.call_requests import CaseQuery, TaskQuery, TaskSearch
from surehand.dispatcher.context import Services
from surehand.errors import CaseNotFound, TaskNotFound, ValidationFailed
from surehand.model import (
    Attempt,
    AttemptState,
    Bucket,
    InterruptionCase,
    Operation,
    Report,
    Task,
    TaskEvent,
)
from surehand.model.listing import Count, Cursor, Page
from surehand.store import attempts, cases, events, listing, reports, tasks
from surehand.store import operations as operation_rows

__all__ = [
    "attempts_of",
    "case",
    "cases_of",
    "count_tasks",
    "find_tasks",
    "get_task",
    "held",
    "history",
    "latest_operation",
    "list_tasks",
    "open_operations",
    "operation",
    "operations_of",
    "reports_of",
    "sessions",
]


def get_task(services: Services, tenant: str, task_id: str) -> Task:
    """The TASK ``task_id`` of ``tenant``; TaskNotFound otherwise."""
    with services.store.snapshot() as connection:
        return _task(tasks.get(connection, task_id, tenant=tenant), task_id, tenant)


def _task(found: Task | None, task_id: str, tenant: str) -> Task:
    if found is None:
        raise TaskNotFound(f"no {task_id} in tenant {tenant!r}; `surehand tasks` lists them")
    return found


def list_tasks(services: Services, tenant: str, query: TaskQuery) -> list[Task]:
    """``tenant``'s TASKs, newest first, filtered and paged by ``query``."""
    with services.store.snapshot() as connection:
        return tasks.list_tasks(
            connection,
            tenant=tenant,
            bucket=query.bucket,
            recipient=query.recipient,
            limit=query.limit,
            offset=query.offset,
        )


def find_tasks(services: Services, tenant: str, query: TaskSearch) -> Page:
    """A page of ``tenant``'s TASKs, newest first, filtered and searched in the store; a text
    search reads at most SUREHAND_SEARCH_SCAN_ROWS TASKs (``Page.scanned`` says when it
    stopped there). A cursor that is not one of this list's is ValidationFailed."""
    after, before = _cursor(query.after, "after"), _cursor(query.before, "before")
    with services.store.snapshot() as connection:
        return listing.page(
            connection,
            _task_filter(tenant, query),
            after=after,
            before=before,
            limit=query.limit,
            scan=services.settings.search_scan_rows,
        )


def count_tasks(services: Services, tenant: str, query: TaskSearch) -> dict[Bucket, Count]:
    """``tenant``'s TASKs per bucket matching ``query``'s filters (a text search counts the
    matches among each bucket's newest SUREHAND_SEARCH_SCAN_ROWS)."""
    wanted = _task_filter(tenant, query)
    with services.store.snapshot() as connection:
        return listing.counts(connection, wanted, scan=services.settings.search_scan_rows)


def _task_filter(tenant: str, query: TaskSearch) -> listing.TaskFilter:
    return listing.TaskFilter(tenant, query.bucket, query.recipient, query.priority, query.text)


def _cursor(value: str | None, name: str) -> Cursor | None:
    if value is None:
        return None
    try:
        return Cursor.decode(value)
    except ValueError:
        raise ValidationFailed(name, "is not a page cursor of this list; start again") from None


def history(services: Services, tenant: str, task_id: str) -> list[TaskEvent]:
    """The TASK's append-only history, oldest first; TaskNotFound outside ``tenant``."""
    with services.store.snapshot() as connection:
        _task(tasks.get(connection, task_id, tenant=tenant), task_id, tenant)
        return events.history(connection, task_id)


def reports_of(services: Services, tenant: str, task_id: str) -> list[Report]:
    """The TASK's REPORTs, in the order they were written; TaskNotFound outside ``tenant``."""
    with services.store.snapshot() as connection:
        _task(tasks.get(connection, task_id, tenant=tenant), task_id, tenant)
        return reports.for_task(connection, task_id)


def attempts_of(services: Services, tenant: str, task_id: str) -> list[Attempt]:
    """The TASK's attempts, first to last; TaskNotFound outside ``tenant``."""
    with services.store.snapshot() as connection:
        _task(tasks.get(connection, task_id, tenant=tenant), task_id, tenant)
        return attempts.for_task(connection, task_id)


def operations_of(services: Services, tenant: str, task_id: str) -> list[Operation]:
    """The operations the TASK's attempts declared; TaskNotFound outside ``tenant``."""
    with services.store.snapshot() as connection:
        _task(tasks.get(connection, task_id, tenant=tenant), task_id, tenant)
        return operation_rows.for_task(connection, task_id)


def held(services: Services, tenant: str, query: CaseQuery) -> list[tuple[InterruptionCase, Task]]:
    """``tenant``'s open cases held for review with their TASKs, P0 first, then the longest
    waiting (at most ``query.limit``)."""
    with services.store.snapshot() as connection:
        return cases.held(connection, tenant=tenant, limit=query.limit)


def cases_of(services: Services, tenant: str, query: CaseQuery) -> list[InterruptionCase]:
    """Interruption cases of ``tenant``'s TASKs, newest first, filtered by ``query``."""
    with services.store.snapshot() as connection:
        return cases.listing(
            connection,
            state=query.state,
            tenant=tenant,
            task_id=query.task_id,
            limit=query.limit,
        )


def case(services: Services, tenant: str, case_id: str) -> InterruptionCase:
    """The interruption case ``case_id`` of a TASK of ``tenant``; CaseNotFound otherwise."""
    with services.store.snapshot() as connection:
        found = cases.get(connection, case_id)
        task = tasks.get(connection, found.task_id, tenant=tenant) if found else None
    if found is None or task is None:
        raise CaseNotFound(f"no interruption case {case_id}; `surehand cases` lists them")
    return found


def sessions(services: Services, tenant: str, limit: int) -> tuple[list[Attempt], list[Attempt]]:
    """``tenant``'s running attempts and its lost ones (``SESSION_LOST``), the most recently
    started first (at most ``limit`` of each)."""
    with services.store.snapshot() as connection:
        running, lost = (
            attempts.of_tenant(connection, tenant=tenant, state=state, limit=limit)
            for state in (AttemptState.RUNNING, AttemptState.SESSION_LOST)
        )
    return running, lost


def operation(services: Services, operation_id: int) -> Operation | None:
    """The operation ``operation_id`` (None when there is none): the session tools check that
    it is their own attempt's before they settle it."""
    with services.store.snapshot() as connection:
        return operation_rows.get(connection, operation_id)


def latest_operation(services: Services, task_id: str, fingerprint: str) -> Operation | None:
    """The TASK's latest operation with ``fingerprint`` (what an effect declared again
    finds already done)."""
    with services.store.snapshot() as connection:
        return operation_rows.latest_by_fingerprint(connection, task_id, fingerprint)


def open_operations(services: Services, attempt_id: str) -> list[int]:
    """The ids of the attempt's operations still open (declared, no outcome yet)."""
    with services.store.snapshot() as connection:
        return operation_rows.open_for_attempt(connection, attempt_id)
