"""``Surehand``: the Python front door. Every method calls the same service layer as the CLI,
HTTP and MCP doors and returns the same records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from surehand.clock import Clock, SystemClock
from surehand.config import Settings
from surehand.dispatcher import diagnostics, lifecycle, reports, submissions
from surehand.dispatcher.context import Publisher, Services
from surehand.errors import TaskNotFound
from surehand.model import (
    Action,
    Bucket,
    Report,
    SubmissionDiagnosis,
    Task,
    TaskEvent,
    WriteReportResult,
    WriteTaskResult,
)
from surehand.requests import ReportRequest, TaskRequest
from surehand.store import Store, events, tasks
from surehand.store import reports as report_rows


class Surehand:
    """A handle on one surehand deployment (or the embedded default).

    ``Surehand()`` uses a SQLite file under ``./.surehand/``; pass ``database_url`` (and
    ``redis_url``/``broker_url`` for sessions) or use :meth:`from_env` to read ``SUREHAND_*``.
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        redis_url: str | None = None,
        broker_url: str | None = None,
        tenant: str | None = None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        base = settings or Settings()
        overrides = {
            key: value
            for key, value in {
                "database_url": database_url,
                "redis_url": redis_url,
                "broker_url": broker_url,
                "tenant": tenant,
            }.items()
            if value is not None
        }
        self.settings = base.model_copy(update=overrides)
        self.store = Store(self.settings.resolved_database_url())
        self.services = Services(
            store=self.store,
            settings=self.settings,
            clock=clock or SystemClock(),
            publisher=publisher,
        )

    @classmethod
    def from_env(cls) -> Surehand:
        """Configure from ``SUREHAND_*`` environment variables."""
        return cls(settings=Settings())

    @property
    def tenant(self) -> str:
        return self.settings.tenant

    # -- submissions ----------------------------------------------------------------------------

    def write_task(
        self, request: TaskRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> WriteTaskResult:
        """Create a TASK once per ``client_submission_id`` (reuse it on every retry).

        Same id and request: the first result, ``reused``. Same id, different request: a
        ``conflict``. No id: a TASK with no retry guarantee (``idempotent: false``).
        """
        payload = request if request is not None else fields
        return submissions.write_task(self.services, payload, tenant=self.tenant)

    def diagnose_submission(self, client_submission_id: str) -> SubmissionDiagnosis:
        """Read-only facts about a submission's receipt (never repairs anything)."""
        return diagnostics.diagnose_submission(self.services, self.tenant, client_submission_id)

    def stalled_submissions(self) -> list[SubmissionDiagnosis]:
        return diagnostics.stalled_submissions(self.services)

    # -- reports and lifecycle ------------------------------------------------------------------

    def write_report(
        self, request: ReportRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> WriteReportResult:
        """Write a REPORT on a TASK; an identical one returns ``deduplicated: true``."""
        payload = request if request is not None else fields
        return reports.write_report(self.services, payload, tenant=self.tenant)

    def transition(
        self,
        task_id: str,
        action: Action | str,
        *,
        actor: str,
        reason: str | None = None,
        report_id: str | None = None,
    ) -> Task:
        """Move a TASK between buckets; anything off the lifecycle table is IllegalTransition."""
        return lifecycle.transition(
            self.services,
            task_id,
            Action(action),
            actor=actor,
            tenant=self.tenant,
            reason=reason,
            report_id=report_id,
        )

    # -- reads ----------------------------------------------------------------------------------

    def get_task(self, task_id: str) -> Task:
        with self.store.snapshot() as connection:
            task = tasks.get(connection, task_id, tenant=self.tenant)
        if task is None:
            raise TaskNotFound(
                f"no {task_id} in tenant {self.tenant!r}; `surehand tasks` lists them"
            )
        return task

    def list_tasks(
        self,
        *,
        bucket: Bucket | str | None = None,
        recipient: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Task]:
        with self.store.snapshot() as connection:
            return tasks.list_tasks(
                connection,
                tenant=self.tenant,
                bucket=Bucket(bucket) if bucket is not None else None,
                recipient=recipient,
                limit=limit,
                offset=offset,
            )

    def history(self, task_id: str) -> list[TaskEvent]:
        """The TASK's append-only history, oldest first."""
        self.get_task(task_id)
        with self.store.snapshot() as connection:
            return events.history(connection, task_id)

    def reports(self, task_id: str) -> list[Report]:
        self.get_task(task_id)
        with self.store.snapshot() as connection:
            return report_rows.for_task(connection, task_id)

    def upgrade(self) -> str:
        """Apply pending migrations (``surehand db upgrade``)."""
        return self.store.upgrade()

    def close(self) -> None:
        self.store.dispose()
