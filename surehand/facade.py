"""``Surehand``: the Python front door. Every method calls the same service layer as the CLI,
HTTP and MCP doors and returns the same records."""

from __future__ import annotations

import copy
import dataclasses
import threading
import weakref
from collections.abc import Callable, Mapping
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from surehand import metrics
from surehand.agents.builtin import register_builtin_agents
from surehand.agents.registry import AgentHandler, AgentRegistry, Probe, declare_probe
from surehand.agents.session_door import SessionDoorFactory
from surehand.clock import Clock, SystemClock
from surehand.config import Settings
from surehand.dispatcher import diagnostics, lifecycle, reports, submissions
from surehand.dispatcher.context import Publisher, Services
from surehand.dispatcher.dispatch import publish_after_commit, publish_successor
from surehand.errors import CaseNotFound, ConfigError, TaskNotFound, ValidationFailed
from surehand.model import (
    Action,
    Admission,
    Attempt,
    AttemptState,
    Bucket,
    CaseState,
    InterruptionCase,
    Operation,
    Report,
    SubmissionDiagnosis,
    Task,
    TaskEvent,
    WriteReportResult,
    WriteTaskResult,
)
from surehand.principals import Principal, local_principal
from surehand.requests import (
    CaseQuery,
    ReportRequest,
    TaskQuery,
    TaskRequest,
    TaskSearch,
    case_id_arg,
    parse,
    submission_id_arg,
    task_id_arg,
)
from surehand.store import Store, events, listing, tasks
from surehand.store import attempts as attempt_rows
from surehand.store import cases as case_rows
from surehand.store import operations as operation_rows
from surehand.store import reports as report_rows

if TYPE_CHECKING:
    # Imported where they are used: a process that only reads or writes the store (the CLI's
    # `tasks`, `show`, `submit`) never imports Celery, kombu, redis or fakeredis.
    from celery import Celery

    from surehand.dispatcher.reconciler import PassReport, Reconciler
    from surehand.dispatcher.recovery import Recovery, RecoveryOutcome
    from surehand.dispatcher.runner import SessionOutcome, SessionRunner
    from surehand.queue.leases import LeaseStore

_ACTING_LOCK = threading.Lock()


def _principal_tenant(tenant: str | None, principal: Principal | None) -> str | None:
    """The tenant a handle acts in: the principal's, which an explicit tenant must match."""
    if principal is None or tenant is None:
        return principal.tenant if principal is not None else tenant
    if tenant != principal.tenant:
        raise ConfigError(
            f"principal {principal.name!r} belongs to tenant {principal.tenant!r}, not {tenant!r}; "
            "omit tenant or pass the principal of that tenant"
        )
    return tenant


class Surehand:
    """A handle on one surehand deployment (or the embedded default).

    ``Surehand()`` uses a SQLite file under ``./.surehand/``; pass ``database_url`` (and
    ``redis_url``/``broker_url`` for sessions) or use :meth:`from_env` to read ``SUREHAND_*``.

    Every argument is validated before it reaches the store (bad input is ValidationFailed
    naming the field). The handle acts as ``principal``: by default the local ADMIN of its
    tenant, since whoever holds the database URL is the operator; pass a narrower principal
    (or use :meth:`acting_as`) to hold a caller to its own role (``surehand.principals``).
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
        principal: Principal | None = None,
    ) -> None:
        base = settings or Settings()
        tenant = _principal_tenant(tenant, principal)
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
        self._principal = principal
        self._acting: dict[Principal, Surehand] = {}  # shared by copies: views per principal
        self.store = Store(
            self.settings.resolved_database_url(), pool_size=self.settings.database_pool_size
        )
        if publisher is None and self.settings.broker_url:
            publisher = self.publish
        self.services = Services(
            store=self.store,
            settings=self.settings,
            clock=clock or SystemClock(),
            publisher=publisher,
        )
        # What close() releases; an instance dropped without close() is released by the
        # finalizer, which must not refer to the instance (or it would never be collected).
        self._closers: list[Callable[[], None]] = [self.store.dispose]
        self._finalizer = weakref.finalize(self, _close_all, self._closers)
        self._probes: dict[str, Probe] = {}  # @self.probe before the registry is built

    @classmethod
    def from_env(cls) -> Surehand:
        """Configure from ``SUREHAND_*`` environment variables."""
        return cls(settings=Settings())

    @property
    def tenant(self) -> str:
        return self.settings.tenant

    @property
    def principal(self) -> Principal:
        """Who this handle acts as (the local ADMIN of its tenant unless configured); a copy
        moved to another tenant keeps the configured principal's role, never gaining ADMIN."""
        if self._principal is None:
            return local_principal(self.tenant)
        if self._principal.tenant != self.tenant:
            return dataclasses.replace(self._principal, tenant=self.tenant)
        return self._principal

    def acting_as(self, principal: Principal) -> Surehand:
        """A handle sharing this one's store, leases and broker that acts as ``principal`` in
        its tenant (what the HTTP and MCP doors use for each caller); one per principal."""
        with _ACTING_LOCK:
            view = self._acting.get(principal)
            if view is None:
                view = copy.copy(self)
                if principal.tenant != self.tenant:
                    view.settings = self.settings.model_copy(update={"tenant": principal.tenant})
                view._principal = principal
                self._acting[principal] = view
            return view

    # -- submissions ----------------------------------------------------------------------------

    def write_task(
        self, request: TaskRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> WriteTaskResult:
        """Create a TASK once per ``client_submission_id`` (reuse it on every retry).

        Same id and request: the first result, ``reused``. Same id, different request: a
        ``conflict``. No id: a TASK with no retry guarantee (``idempotent: false``).
        """
        payload = request if request is not None else fields
        result = submissions.write_task(
            self.services, payload, tenant=self.tenant, principal=self.principal
        )
        metrics.observe_submission(result.disposition.value)
        return result

    def diagnose_submission(self, client_submission_id: str) -> SubmissionDiagnosis:
        """Read-only facts about a submission's receipt (never repairs anything)."""
        submission_id = submission_id_arg(client_submission_id)
        return diagnostics.diagnose_submission(self.services, self.tenant, submission_id)

    def stalled_submissions(self) -> list[SubmissionDiagnosis]:
        return diagnostics.stalled_submissions(self.services)

    # -- reports and lifecycle ------------------------------------------------------------------

    def write_report(
        self, request: ReportRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> WriteReportResult:
        """Write a REPORT on a TASK; an identical one returns ``deduplicated: true``."""
        payload = request if request is not None else fields
        return reports.write_report(
            self.services, payload, tenant=self.tenant, principal=self.principal
        )

    def transition(
        self,
        task_id: str,
        action: Action | str,
        *,
        actor: str,
        reason: str | None = None,
        report_id: str | None = None,
    ) -> Task:
        """Move a TASK between buckets; anything off the lifecycle table is IllegalTransition.

        A TASK sent back for rework (reject, reopen) is published for a new attempt.
        """
        moved = lifecycle.transition(
            self.services,
            task_id,
            action,
            actor=actor,
            tenant=self.tenant,
            reason=reason,
            report_id=report_id,
            principal=self.principal,
        )
        if Action(action) in lifecycle.REWORK_ACTIONS:  # valid: transition parsed it
            publish_after_commit(self.services, task_id)
        return moved

    # -- reads ----------------------------------------------------------------------------------

    def get_task(self, task_id: str) -> Task:
        task_id = task_id_arg(task_id)
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
        """TASKs of this tenant, newest first (``limit`` 1-1000, ``offset`` 0-2**31-1)."""
        query = parse(TaskQuery, bucket=bucket, recipient=recipient, limit=limit, offset=offset)
        with self.store.snapshot() as connection:
            return tasks.list_tasks(
                connection,
                tenant=self.tenant,
                bucket=query.bucket,
                recipient=query.recipient,
                limit=query.limit,
                offset=query.offset,
            )

    def find_tasks(self, **search: Any) -> listing.Page:
        """A page of this tenant's TASKs, newest first, filtered and searched in the store
        (see :class:`surehand.requests.TaskSearch`); its cursors page on without gaps."""
        query = parse(TaskSearch, **search)
        wanted = _task_filter(self.tenant, query)
        after, before = _cursor(query.after, "after"), _cursor(query.before, "before")
        with self.store.snapshot() as connection:
            return listing.page(connection, wanted, after=after, before=before, limit=query.limit)

    def count_tasks(self, **search: Any) -> dict[Bucket, listing.Count]:
        """This tenant's TASKs per bucket matching the filters (a text search counts up to
        1,000 per bucket and says when there are more)."""
        wanted = _task_filter(self.tenant, parse(TaskSearch, **search))
        with self.store.snapshot() as connection:
            return listing.counts(connection, wanted)

    def held(self, limit: int = 200) -> list[tuple[InterruptionCase, Task]]:
        """Open cases held for review and their TASKs, P0 first, then the longest waiting."""
        query = parse(CaseQuery, limit=min(limit, 1000))
        with self.store.snapshot() as connection:
            return case_rows.held(connection, tenant=self.tenant, limit=query.limit)

    def history(self, task_id: str) -> list[TaskEvent]:
        """The TASK's append-only history, oldest first."""
        task_id = self.get_task(task_id).task_id
        with self.store.snapshot() as connection:
            return events.history(connection, task_id)

    def reports(self, task_id: str) -> list[Report]:
        task_id = self.get_task(task_id).task_id
        with self.store.snapshot() as connection:
            return report_rows.for_task(connection, task_id)

    # -- sessions and recovery -----------------------------------------------------------------

    def agent(self, role: str, *, review: bool = True) -> Callable[[AgentHandler], AgentHandler]:
        """Register the handler that runs sessions for TASKs sent to ``role``.

        ``review=False`` settles straight to ``done`` instead of ``review``.
        """
        return self.registry.agent(role, review=review)

    def probe(self, name: str) -> Callable[[Probe], Probe]:
        """Register a probe: given an interrupted operation, say whether its effect happened
        (True), did not (False), or cannot tell (None).

        In an agents module named by SUREHAND_AGENTS, ``@sh.probe`` on the module's own handle
        also registers the probe in the worker, beat, reconcile, up or api process that loads
        the module (``SUREHAND_PROBES=name=module:function`` is the other way).
        """

        def decorate(function: Probe) -> Probe:
            declare_probe(name, function)
            self._probes[name] = function
            # Not built yet: building it here would import the agents modules, possibly the
            # very module being imported now; the registry takes ``_probes`` when built.
            if "registry" in self.__dict__:
                self.registry.register_probe(name, function)
            return function

        return decorate

    @cached_property
    def registry(self) -> AgentRegistry:
        registry = AgentRegistry()
        register_builtin_agents(registry, self.settings, session_door())
        if self.settings.agents:
            registry.load(self.settings.agents)
        if self.settings.probes:
            registry.load_probes(self.settings.probes)
        for name, probe in self._probes.items():
            registry.register_probe(name, probe)
        return registry

    @cached_property
    def leases(self) -> LeaseStore:
        from surehand.queue.leases import LeaseStore
        from surehand.queue.redis_client import connect_redis

        client = connect_redis(self.settings.redis_url)
        self._closers.append(client.close)
        return LeaseStore(client, namespace=self.settings.redis_namespace)

    @cached_property
    def runner(self) -> SessionRunner:
        from surehand.dispatcher.runner import SessionRunner

        return SessionRunner(self.services, self.registry, self.leases)

    @cached_property
    def recovery(self) -> Recovery:
        from surehand.dispatcher.admission import Admitter
        from surehand.dispatcher.recovery import Recovery

        admitter = Admitter(self.services, self.leases, self.registry.probe)
        return Recovery(admitter)

    @cached_property
    def reconciler(self) -> Reconciler:
        from surehand.dispatcher.reconciler import Reconciler

        live = self._live_jobs if self.settings.broker_url else None
        return Reconciler(self.recovery, live_jobs=live)

    def _live_jobs(self) -> set[str]:
        """TASK ids of the sessions the workers report running (Celery ``inspect active``)."""
        # Asked only once a grace has run out; keep the wait a small part of that grace so the
        # detection bound (TTL + reconcile interval + grace) still holds.
        from surehand.queue.celery_app import SESSION_TASK_NAME

        timeout = min(1.0, max(0.1, self.settings.lost_grace_seconds / 4))
        replies = self.celery.control.inspect(timeout=timeout).active() or {}
        return {
            str(job["args"][0])
            for jobs in replies.values()
            for job in jobs
            if job.get("name") == SESSION_TASK_NAME and job.get("args")
        }

    @cached_property
    def celery(self) -> Celery:
        """The Celery app with surehand's session and reconcile tasks registered."""
        from surehand.dispatcher.worker import register_tasks
        from surehand.queue import broker_pools
        from surehand.queue.celery_app import make_celery
        from surehand.queue.notices import register_hold_notice

        app = make_celery(self.settings)
        self._closers.append(broker_pools.use(app))
        # The app becomes the process default (held globally): its tasks reach this instance
        # through a weak reference, so that the instance can still be dropped.
        owner = weakref.ref(self)
        register_tasks(
            app,
            lambda: _alive(owner).runner,
            lambda: _alive(owner).reconciler,
            reconcile_every=self.settings.reconcile_interval_seconds,
        )
        register_hold_notice(app)
        # Celery's worker pools run a message through ``current_app`` (the process default,
        # not a thread-local), so the app that owns these tasks must be that default.
        app.set_default()
        app.set_current()
        return app

    def publish(self, task: Task) -> None:
        """Publish ``run_session`` for a TASK to its recipient's queue (raises PublishFailed)."""
        from surehand.queue.celery_app import publish_session

        publish_session(self.celery, task.task_id, task.fields.recipient, task.fields.priority)

    def _notify_hold(self, case: InterruptionCase) -> None:
        # Only with a broker: a hold notice is a Celery task, shown by Flower (notices.py).
        if self.settings.broker_url:
            from surehand.queue.notices import send_hold_notices

            held = {"task_id": case.task_id, "case_id": case.case_id}
            send_hold_notices(self.celery, [{**held, "attempt": case.interrupted_epoch}])

    def run_session(self, task_id: str) -> SessionOutcome:
        """Claim and run one TASK in this process (what a worker does for each message)."""
        return self.runner.run(task_id)

    def reconcile(self) -> PassReport:
        """One reconciler pass: find lost sessions, open cases, admit successors."""
        report = self.reconciler.run_once()
        if report.held and self.settings.broker_url:
            from surehand.queue.notices import send_hold_notices

            send_hold_notices(self.celery, report.held)  # so Flower shows the held TASKs
        return report

    def recover(self, task_id: str, *, actor: str) -> RecoveryOutcome:
        """Ask for a successor for an interrupted TASK; admission decides from the evidence."""
        outcome = self.recovery.recover(
            task_id, actor=actor, tenant=self.tenant, principal=self.principal
        )
        metrics.observe_admission(outcome.admission.value)
        if outcome.admission is Admission.REEXECUTE:
            publish_successor(self.services, task_id)
        elif outcome.case is not None and outcome.admission is Admission.HOLD_FOR_REVIEW:
            self._notify_hold(outcome.case)
        return outcome

    def review(
        self,
        case_id: str,
        *,
        effect: Literal["present", "absent"] | None = None,
        note: str,
        actor: str,
        operations: Mapping[int, Literal["present", "absent"]] | None = None,
    ) -> InterruptionCase:
        """An approver states whether a held case's effects happened; admission runs again.

        ``effect`` (exactly ``"present"`` or ``"absent"``) answers every unsettled operation,
        or ``operations`` answers each by its id; anything else is ValidationFailed.
        """
        case = self.recovery.review(
            case_id,
            effect=effect,
            operations=operations,
            note=note,
            actor=actor,
            tenant=self.tenant,
            principal=self.principal,
        )
        if case.admission is not None:
            metrics.observe_admission(case.admission.value)
        if case.admission is Admission.REEXECUTE:
            publish_successor(self.services, case.task_id)
        return case

    def cases(
        self,
        *,
        state: CaseState | str | None = None,
        task_id: str | None = None,
        limit: int = 100,
    ) -> list[InterruptionCase]:
        """Interruption cases of this tenant's TASKs, newest first (``limit`` 1-1000)."""
        query = parse(CaseQuery, state=state, task_id=task_id, limit=limit)
        with self.store.snapshot() as connection:
            return case_rows.listing(
                connection,
                state=query.state,
                tenant=self.tenant,
                task_id=query.task_id,
                limit=query.limit,
            )

    def case(self, case_id: str) -> InterruptionCase:
        case_id = case_id_arg(case_id)
        with self.store.snapshot() as connection:
            found = case_rows.get(connection, case_id)
            task = tasks.get(connection, found.task_id, tenant=self.tenant) if found else None
        if found is None or task is None:
            raise CaseNotFound(f"no interruption case {case_id}; `surehand cases` lists them")
        return found

    def attempts(self, task_id: str) -> list[Attempt]:
        task_id = self.get_task(task_id).task_id
        with self.store.snapshot() as connection:
            return attempt_rows.for_task(connection, task_id)

    def sessions(self, limit: int = 200) -> tuple[list[Attempt], list[Attempt]]:
        """This tenant's running attempts and its lost ones (``SESSION_LOST``), the most
        recently started first (``limit`` 1-1000 of each)."""
        query = parse(CaseQuery, limit=limit)
        with self.store.snapshot() as connection:
            running, lost = (
                attempt_rows.of_tenant(
                    connection, tenant=self.tenant, state=state, limit=query.limit
                )
                for state in (AttemptState.RUNNING, AttemptState.SESSION_LOST)
            )
        return running, lost

    def operations(self, task_id: str) -> list[Operation]:
        task_id = self.get_task(task_id).task_id
        with self.store.snapshot() as connection:
            return operation_rows.for_task(connection, task_id)

    def upgrade(self) -> str:
        """Apply pending migrations (``surehand db upgrade``)."""
        return self.store.upgrade()

    def close(self) -> None:
        """Release this instance's connections: its share of the store's pools, its Redis
        client and its Celery app's broker connections. Idempotent."""
        self._finalizer()

    def __enter__(self) -> Surehand:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _task_filter(tenant: str, query: TaskSearch) -> listing.TaskFilter:
    return listing.TaskFilter(tenant, query.bucket, query.recipient, query.priority, query.text)


def _cursor(value: str | None, name: str) -> listing.Cursor | None:
    if value is None:
        return None
    try:
        return listing.Cursor.decode(value)
    except ValueError:
        raise ValidationFailed(name, "is not a page cursor of this list; start again") from None


def _close_all(closers: list[Callable[[], None]]) -> None:
    # Each closer runs even if one before it failed (a Redis already gone must not keep the
    # database pools open); the first failure is raised afterwards.
    failure: Exception | None = None
    for close in closers:
        try:
            close()
        except Exception as error:
            failure = failure or error
    if failure is not None:
        raise failure


def _alive(owner: weakref.ReferenceType[Surehand]) -> Surehand:
    found = owner()
    if found is None:
        raise ConfigError("the Surehand that registered this Celery app was closed and dropped")
    return found


def session_door() -> SessionDoorFactory | None:
    """The session MCP server for command agents; None when the ``mcp`` extra is missing."""
    try:
        from surehand.mcp.session_server import SessionMcp
    except ImportError:
        return None
    return SessionMcp.shared
