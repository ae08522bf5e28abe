"""The read calls of :class:`surehand.Surehand`: TASKs, their history, REPORTs, attempts,
operations, cases, sessions, paused roles and submissions' receipts, each argument parsed
before it reaches the service layer's queries (:mod:`surehand.dispatcher.queries`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from surehand.call_requests import (
    CaseQuery,
    TaskQuery,
    TaskSearch,
    case_id_arg,
    parse,
    submission_id_arg,
    task_id_arg,
)
from surehand.dispatcher import diagnostics, pauses, queries, task_tree
from surehand.dispatcher.context import Services
from surehand.model import (
    Attempt,
    Bucket,
    CaseState,
    InterruptionCase,
    Operation,
    Report,
    SubmissionDiagnosis,
    Task,
    TaskEvent,
)
from surehand.model.listing import Count, Page
from surehand.model.pauses import Pause


class Reads(ABC):
    """What :class:`surehand.Surehand` reads, in its tenant; it supplies ``services`` and
    ``tenant`` (a mixin: the handle is the one public entry)."""

    @property
    @abstractmethod
    def services(self) -> Services:
        """The service layer the reads go through."""

    @property
    @abstractmethod
    def tenant(self) -> str:
        """The tenant every read is confined to."""

    def diagnose_submission(self, client_submission_id: str) -> SubmissionDiagnosis:
        """Read-only facts about a submission's receipt (never repairs anything)."""
        submission_id = submission_id_arg(client_submission_id)
        return diagnostics.diagnose_submission(self.services, self.tenant, submission_id)

    def paused_roles(self) -> list[Pause]:
        """This tenant's paused roles."""
        return pauses.paused_roles(self.services, self.tenant)

    def get_task(self, task_id: str) -> Task:
        return queries.get_task(self.services, self.tenant, task_id_arg(task_id))

    def list_tasks(
        self,
        *,
        bucket: Bucket | str | None = None,
        recipient: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Task]:
        """TASKs of this tenant, newest first (``limit`` 1-1000, ``offset`` 0-2**31-1)."""
        query = parse(TaskQuery, bucket=bucket, recipient=recipient, limit=limit, offset=offset)
        return queries.list_tasks(self.services, self.tenant, query)

    def find_tasks(self, **search: Any) -> Page:
        """A page of this tenant's TASKs, newest first, filtered and searched in the store
        (see :class:`surehand.call_requests.TaskSearch`); its cursors page on without gaps. A text
        search reads at most SUREHAND_SEARCH_SCAN_ROWS TASKs (``Page.scanned`` says when it
        stopped there; the older-cursor goes on from where it stopped)."""
        return queries.find_tasks(self.services, self.tenant, parse(TaskSearch, **search))

    def count_tasks(self, **search: Any) -> dict[Bucket, Count]:
        """This tenant's TASKs per bucket matching the filters (a text search counts the
        matches among each bucket's newest SUREHAND_SEARCH_SCAN_ROWS and says when there are
        more)."""
        return queries.count_tasks(self.services, self.tenant, parse(TaskSearch, **search))

    def held(self, limit: int = 200) -> list[tuple[InterruptionCase, Task]]:
        """Open cases held for review and their TASKs, P0 first, then the longest waiting."""
        query = parse(CaseQuery, limit=min(limit, 1000))
        return queries.held(self.services, self.tenant, query)

    def history(self, task_id: str) -> list[TaskEvent]:
        """The TASK's append-only history, oldest first."""
        return queries.history(self.services, self.tenant, task_id_arg(task_id))

    def children_tree(self, task_id: str) -> list[task_tree.Node]:
        """The TASK's descendants (children, theirs, ...) with buckets and holds."""
        return task_tree.tree(self.services, self.get_task(task_id).task_id)

    def reports(self, task_id: str) -> list[Report]:
        return queries.reports_of(self.services, self.tenant, task_id_arg(task_id))

    def cases(
        self,
        *,
        state: CaseState | str | None = None,
        task_id: str | None = None,
        limit: int = 100,
    ) -> list[InterruptionCase]:
        """Interruption cases of this tenant's TASKs, newest first (``limit`` 1-1000)."""
        query = parse(CaseQuery, state=state, task_id=task_id, limit=limit)
        return queries.cases_of(self.services, self.tenant, query)

    def case(self, case_id: str) -> InterruptionCase:
        return queries.case(self.services, self.tenant, case_id_arg(case_id))

    def attempts(self, task_id: str) -> list[Attempt]:
        return queries.attempts_of(self.services, self.tenant, task_id_arg(task_id))

    def sessions(self, limit: int = 200) -> tuple[list[Attempt], list[Attempt]]:
        """This tenant's running attempts and its lost ones (``SESSION_LOST``), the most
        recently started first (``limit`` 1-1000 of each)."""
        query = parse(CaseQuery, limit=limit)
        return queries.sessions(self.services, self.tenant, query.limit)

    def operations(self, task_id: str) -> list[Operation]:
        return queries.operations_of(self.services, self.tenant, task_id_arg(task_id))
