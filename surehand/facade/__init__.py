"""``Surehand``: the Python front door. Every method calls the same service layer as the CLI,
HTTP and MCP doors and returns the same records. The handle, its writes and its sessions are
here; its reads are inherited from :class:`surehand.facade.reads.Reads`."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from surehand.agents.registry import AgentHandler, AgentRegistry, Probe, declare_probe
from surehand.call_requests import task_id_arg
from surehand.clock import Clock
from surehand.config import Settings
from surehand.dispatcher import actions, dependency_holds, pauses, reports
from surehand.dispatcher.cancel import CancelOutcome
from surehand.dispatcher.cancel import cancel as cancel_task
from surehand.dispatcher.context import Publisher, Services
from surehand.errors import ConfigError
from surehand.facade.reads import Reads
from surehand.model import Action, InterruptionCase, Task, WriteReportResult, WriteTaskResult
from surehand.model.pauses import Pause
from surehand.principals import Principal, acting_for, local_principal
from surehand.requests import ReportRequest, TaskRequest
from surehand.runtime import Runtime
from surehand.store import Store

if TYPE_CHECKING:
    # Imported where they are used: a process that only reads or writes the store (the CLI's
    # `tasks`, `show`, `submit`) never imports Celery, kombu, redis or fakeredis.
    from celery import Celery

    from surehand.dispatcher.reconciler import PassReport, Reconciler
    from surehand.dispatcher.recovery import Recovery, RecoveryOutcome
    from surehand.dispatcher.runner import SessionRunner
    from surehand.dispatcher.session_exits import SessionOutcome
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


class Surehand(Reads):
    """A handle on one surehand deployment (or the embedded default).

    ``Surehand()`` uses a SQLite file under ``./.surehand/``; pass ``database_url`` (and
    ``redis_url``/``broker_url`` for sessions) or use :meth:`from_env` to read ``SUREHAND_*``.

    Every argument is validated before it reaches the store (bad input is ValidationFailed
    naming the field). The handle acts as ``principal``: by default the local ADMIN of its
    tenant, since whoever holds the database URL is the operator; pass a narrower principal
    (or use :meth:`acting_as`) to hold a caller to its own role (``surehand.principals``).

    A handle is light: the shared parts (store, leases, registry, runner, Celery) belong to its
    :class:`~surehand.runtime.Runtime`, built here unless one is passed, and :meth:`acting_as`
    and :meth:`for_tenant` make further handles on the same runtime.
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
        runtime: Runtime | None = None,
    ) -> None:
        tenant = _principal_tenant(tenant, principal)
        self._owns_runtime = runtime is None
        if runtime is None:
            urls = {"database_url": database_url, "redis_url": redis_url, "broker_url": broker_url}
            overrides = {k: v for k, v in urls.items() if v is not None}
            runtime = Runtime(
                (settings or Settings()).model_copy(update=overrides),
                clock=clock,
                publisher=publisher,
            )
        elif any(v is not None for v in (database_url, redis_url, broker_url, settings, clock)):
            raise ConfigError("a handle on a runtime takes its settings and clock from it")
        self.runtime = runtime
        self.settings = runtime.settings_for(tenant or runtime.settings.tenant)
        self._principal = principal

    @classmethod
    def from_env(cls) -> Surehand:
        """Configure from ``SUREHAND_*`` environment variables."""
        return cls(settings=Settings())

    @property
    def tenant(self) -> str:
        return self.settings.tenant

    @property
    def principal(self) -> Principal:
        """Who this handle acts as (the local ADMIN of its tenant unless configured); a handle
        moved to another tenant keeps the configured principal's role, never gaining ADMIN."""
        if self._principal is None:
            return local_principal(self.tenant)
        if self._principal.tenant != self.tenant:
            return dataclasses.replace(self._principal, tenant=self.tenant)
        return self._principal

    def acting_as(self, principal: Principal) -> Surehand:
        """A handle on this one's runtime acting as ``principal`` in its tenant (what the HTTP
        and MCP doors use for each caller)."""
        return Surehand(principal=principal, runtime=self.runtime)

    def for_tenant(self, tenant: str) -> Surehand:
        """A handle on this one's runtime in ``tenant``, as this handle's principal's role."""
        moved = dataclasses.replace(self._principal, tenant=tenant) if self._principal else None
        return Surehand(tenant=tenant, principal=moved, runtime=self.runtime)

    # The runtime's parts, for callers and tests that reach past the service calls.
    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def services(self) -> Services:
        return self.runtime.services

    @property
    def registry(self) -> AgentRegistry:
        return self.runtime.registry

    @property
    def leases(self) -> LeaseStore:
        return self.runtime.leases

    @property
    def runner(self) -> SessionRunner:
        return self.runtime.runner

    @property
    def recovery(self) -> Recovery:
        return self.runtime.recovery

    @property
    def reconciler(self) -> Reconciler:
        return self.runtime.reconciler

    @property
    def celery(self) -> Celery:
        return self.runtime.celery

    def publish(self, task: Task) -> None:
        """Publish ``run_session`` for a TASK to its recipient's queue (raises PublishFailed)."""
        self.runtime.publish(task)

    # -- submissions ----------------------------------------------------------------------------

    def write_task(
        self, request: TaskRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> WriteTaskResult:
        """Create a TASK once per ``client_submission_id`` (reuse it on every retry).

        Same id and request: the first result, ``reused``. Same id, different request: a
        ``conflict``. No id: a TASK with no retry guarantee (``idempotent: false``).
        """
        payload = request if request is not None else fields
        return actions.write_task(
            self.services, payload, tenant=self.tenant, principal=self.principal
        )

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
        return actions.transition(
            self.services,
            task_id,
            action,
            actor=actor,
            tenant=self.tenant,
            reason=reason,
            report_id=report_id,
            principal=self.principal,
        )

    def cancel(self, task_id: str, *, reason: str, actor: str | None = None) -> CancelOutcome:
        """Cancel a TASK (its sender, its approvers or an ADMIN): an ``inbox`` TASK is archived
        and never claimed; a running session is stopped within seconds and its attempt ends
        ``cancelled`` through admission; a held TASK keeps its hold (docs/unattended-cancel.md).
        ``actor``: the role acting (default: this handle's principal's)."""
        return cancel_task(
            self.services,
            task_id,
            actor=actor or self.principal.role,
            reason=reason,
            tenant=self.tenant,
            principal=self.principal,
            admit=self._admit,
        )

    def _admit(self, case_id: str) -> InterruptionCase:
        return self.recovery.admitter.admit(case_id, decided_by=self.principal.role)

    def pause_role(self, role: str, *, reason: str = "", actor: str | None = None) -> Pause:
        """Pause ``role`` in this tenant: no session of it starts until :meth:`resume_role`
        (ADMIN or PM); running sessions continue."""
        return pauses.pause_role(
            self.services,
            role,
            actor=actor or self.principal.role,
            reason=reason,
            tenant=self.tenant,
            principal=self.principal,
        )

    def resume_role(self, role: str, *, actor: str | None = None) -> int:
        """Resume ``role`` and publish its TASKs that waited; how many wait in inbox."""
        return pauses.resume_role(
            self.services,
            role,
            actor=actor or self.principal.role,
            tenant=self.tenant,
            principal=self.principal,
        )

    def release_hold(self, task_id: str, *, actor: str | None = None) -> Task:
        """The approver runs a TASK held by an archived or cancelled dependency anyway: the
        dead dependency is dropped and the TASK dispatched once its others are done
        (docs/delegation.md). To drop it instead, cancel it."""
        role = actor or self.principal.role
        acting_for(self.principal, role, "actor")
        return dependency_holds.release(self.services, task_id, actor=role, tenant=self.tenant)

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
            self.runtime.add_probe(name, function)
            return function

        return decorate

    def run_session(self, task_id: str) -> SessionOutcome:
        """Claim and run one TASK in this process (what a worker does for each message)."""
        return self.runner.run(task_id_arg(task_id))  # a bad id: ValidationFailed on any store

    def reconcile(self) -> PassReport:
        """One reconciler pass: find lost sessions, open cases, admit successors."""
        return self.reconciler.run_once()

    def recover(self, task_id: str, *, actor: str) -> RecoveryOutcome:
        """Ask for a successor for an interrupted TASK; admission decides from the evidence."""
        return actions.recover(
            self.services,
            self.recovery,
            task_id,
            actor=actor,
            tenant=self.tenant,
            principal=self.principal,
        )

    def raise_budget(
        self, task_id: str, *, budget_usd: float, note: str, actor: str
    ) -> tuple[Task, InterruptionCase | None]:
        """An approver raises what the TASK's LLM agent may spend across its attempts
        (recorded); a TASK its budget held goes through admission again. Returns the TASK and
        the case decided again, if one was."""
        return actions.raise_budget(
            self.services,
            self.recovery,
            task_id,
            budget_usd=budget_usd,
            note=note,
            actor=actor,
            tenant=self.tenant,
            principal=self.principal,
        )

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
        return actions.review(
            self.services,
            self.recovery,
            case_id,
            effect=effect,
            operations=operations,
            note=note,
            actor=actor,
            tenant=self.tenant,
            principal=self.principal,
        )

    def upgrade(self) -> str:
        """Apply pending migrations (``surehand db upgrade``)."""
        return self.store.upgrade()

    def close(self) -> None:
        """Release the runtime this handle built (its store's pools, its Redis client and its
        Celery app's broker connections); a handle on another's runtime leaves it. Idempotent."""
        if self._owns_runtime:
            self.runtime.close()

    def __enter__(self) -> Surehand:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
