"""``Runtime``: the shared parts of one surehand deployment in one process.

A runtime owns what is expensive or must be one per process: the store's engine, the Redis
lease client, the agent registry, the session runner, recovery and the reconciler, the Celery
app, and the closers that release them. It is built once; the per-caller
:class:`~surehand.facade.Surehand` handles -- one per principal and tenant, what the network
doors make for every caller -- are light views on it that copy nothing and warm nothing.

Every part is built on first use (a process that only reads the store never imports Celery,
kombu or redis), under a lock, so two callers in two threads never build two.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from surehand.agents.registry import AgentRegistry, Probe
from surehand.agents.session_door import SessionDoorFactory
from surehand.clock import Clock, SystemClock
from surehand.config import Settings
from surehand.dispatcher.context import Publisher, Services
from surehand.errors import ConfigError
from surehand.model import Task
from surehand.requests import validate_tenant
from surehand.store import Store
from surehand.store.engine import sqlite_file

if TYPE_CHECKING:
    from celery import Celery

    from surehand.dispatcher.reconciler import Reconciler
    from surehand.dispatcher.recovery import Recovery
    from surehand.dispatcher.runner import SessionRunner
    from surehand.queue.leases import LeaseStore


class Runtime:
    """The store, leases, registry, runner, recovery, reconciler and Celery app of a process."""

    def __init__(
        self, settings: Settings, *, clock: Clock | None = None, publisher: Publisher | None = None
    ) -> None:
        self.settings = settings
        self.store = Store.from_settings(settings)
        with_broker = bool(settings.broker_url)
        # The publisher's slot, not a method of the runtime: the services must not refer back
        # to the runtime (a cycle would keep a dropped runtime's engines until a second
        # garbage collection).
        self._outbox = _OutboxSlot()
        self.services = Services(
            store=self.store,
            settings=settings,
            clock=clock or SystemClock(),
            publisher=publisher or (self.publish if with_broker else None),
            notify_hold=self.notify_hold if with_broker else None,
            wake_publisher=self._outbox.wake,
            # Only beside our own publisher: a publisher passed in must see every TASK.
            publish_batch=self.publish_batch if with_broker and publisher is None else None,
        )
        # What close() releases; a runtime dropped without close() is released by the
        # finalizer, which must not refer to the runtime (or it would never be collected).
        self._closers: list[Callable[[], None]] = [self.store.dispose]
        self._finalizer = weakref.finalize(self, _close_all, self._closers)
        self._probes: dict[str, Probe] = {}  # declared before the registry is built
        self._lock = threading.RLock()
        self._tenants: dict[str, Settings] = {settings.tenant: settings}

    def settings_for(self, tenant: str) -> Settings:
        """These settings in ``tenant`` (one copy per tenant, shared by its handles)."""
        with self._lock:
            found = self._tenants.get(tenant)
            if found is None:
                found = self.settings.model_copy(update={"tenant": validate_tenant(tenant)})
                self._tenants[tenant] = found
            return found

    def built(self, part: str) -> bool:
        """True once ``part`` (``"leases"``, ``"celery"``, ...) has been built."""
        return part in self.__dict__

    def add_probe(self, name: str, function: Probe) -> None:
        """Register a probe now, or when the registry is built (it may not be built yet:
        building it here would import the agents modules, possibly the one importing now)."""
        with self._lock:
            self._probes[name] = function
            if self.built("registry"):
                self.registry.register_probe(name, function)

    @cached_property
    def registry(self) -> AgentRegistry:
        """Agents and probes: built-ins, ``SUREHAND_AGENTS``, ``SUREHAND_PROBES``, decorators."""
        # Here, not at import: a process that never runs or routes an agent (`surehand tasks`)
        # does not load the command agents' machinery.
        from surehand.agents.builtin import register_builtin_agents
        from surehand.agents.probes import builtin_probes

        with self._lock:
            registry = AgentRegistry()
            register_builtin_agents(registry, self.settings, self.session_door())
            for name, probe in builtin_probes(self.settings).items():
                registry.register_probe(name, probe, builtin=True)
            if self.settings.agents:
                registry.load(self.settings.agents)
            if self.settings.probes:
                registry.load_probes(self.settings.probes)
            for name, probe in self._probes.items():
                registry.register_probe(name, probe)
            return registry

    def session_door(self) -> SessionDoorFactory | None:
        """The session MCP server for this runtime's command agents, on its store and
        settings; None when the ``mcp`` extra is missing. One server per process and store
        serves every runtime on it (the first one's store) and closes nothing of theirs."""
        # A view without the publishers, which refer back to this runtime: the server is
        # process-wide and must not keep a dropped runtime alive.
        return session_door(functools.partial(Services, store=self.store, settings=self.settings))

    @cached_property
    def leases(self) -> LeaseStore:
        """Session leases in Redis (``SUREHAND_REDIS_URL``; fakeredis for ``memory://``)."""
        from surehand.queue.leases import LeaseStore
        from surehand.queue.redis_client import connect_redis

        with self._lock:
            client = connect_redis(self.settings.redis_url)
            self._closers.append(client.close)
            return LeaseStore(client, namespace=self.settings.redis_namespace)

    @cached_property
    def runner(self) -> SessionRunner:
        """Claims and runs sessions in this process."""
        from surehand.dispatcher.runner import SessionRunner

        # Admission on a session stopped on purpose (a cancel, a time limit) runs at once; by a
        # weak reference, so that the runner does not keep a dropped runtime alive.
        owner = weakref.ref(self)
        with self._lock:
            return SessionRunner(
                self.services,
                self.registry,
                self.leases,
                admit=lambda case_id: _alive(owner).recovery.admitter.admit(
                    case_id, decided_by="worker"
                ),
            )

    @cached_property
    def recovery(self) -> Recovery:
        """Interruption cases, admission and reviews."""
        from surehand.dispatcher.admission import Admitter
        from surehand.dispatcher.recovery import Recovery

        with self._lock:
            return Recovery(Admitter(self.services, self.leases, self.registry.probe))

    @cached_property
    def reconciler(self) -> Reconciler:
        """Finds lost sessions; asks the workers which sessions run when there is a broker."""
        from surehand.dispatcher.reconciler import Reconciler

        live = self._live_jobs if self.settings.broker_url else None
        with self._lock:
            return Reconciler(self.recovery, live_jobs=live)

    @cached_property
    def celery(self) -> Celery:
        """The Celery app with surehand's session and reconcile tasks registered."""
        from surehand.dispatcher.worker import register_tasks
        from surehand.queue import broker_pools
        from surehand.queue.celery_app import make_celery
        from surehand.queue.notices import register_hold_notice

        with self._lock:
            app = make_celery(self.settings)
            self._closers.append(broker_pools.use(app))
            # The app becomes the process default (held globally): its tasks reach this
            # runtime through a weak reference, so that the runtime can still be dropped.
            owner = weakref.ref(self)
            register_tasks(
                app,
                lambda: _alive(owner).runner,
                lambda: _alive(owner).reconciler,
                reconcile_every=self.settings.reconcile_interval_seconds,
            )
            register_hold_notice(app)
            # Celery's worker pools run a message through ``current_app`` (the process
            # default, not a thread-local), so the app that owns these tasks must be it.
            app.set_default()
            app.set_current()
            return app

    def start_publishing(self) -> None:
        """Publish created TASKs in the background (``surehand api``, ``surehand up``): a create
        then answers without waiting for the broker. From a thread of this process, or from a
        child process (``SUREHAND_API_PUBLISHER=process``, not for an in-process broker).
        Without a publisher, nothing."""
        with self._lock:
            if self._outbox.publisher is not None or self.services.publisher is None:
                return
            publisher = self._background_publisher()
            # Not among the finalizer's closers (they must not refer to the runtime, which
            # the thread's services do): close() and the door serving it stop it.
            publisher.start()
            self._outbox.publisher = publisher

    def _background_publisher(self) -> BackgroundPublisher:
        from surehand.dispatcher.outbox_publisher import OutboxPublisher
        from surehand.dispatcher.publisher_process import PublisherProcess

        if self.settings.api_publisher == "process" and self._shareable():
            return PublisherProcess(self.settings)
        return OutboxPublisher(self.services, idle_seconds=self.settings.sweep_interval_seconds)

    def _shareable(self) -> bool:
        """Whether another process sees this one's broker and database (not ``memory://``
        queues or an in-memory SQLite, which live in this process alone)."""
        url = self.settings.resolved_database_url()
        in_memory = url.startswith("sqlite") and sqlite_file(url) is None
        return not self.settings.broker_url.startswith("memory:") and not in_memory

    def stop_publishing(self) -> None:
        """Stop the background publisher; creates publish on their own path again."""
        with self._lock:
            publisher, self._outbox.publisher = self._outbox.publisher, None
        if publisher is not None:
            publisher.stop()

    def publish(self, task: Task) -> None:
        """Publish ``run_session`` for a TASK to its recipient's queue (raises PublishFailed)."""
        from surehand.queue.celery_app import publish_session

        publish_session(self.celery, task.task_id, task.fields.recipient, task.fields.priority)

    def publish_batch(self, batch: Sequence[Task]) -> None:
        """Publish ``run_session`` for TASKs together: one pipeline on a Redis broker (raises
        PublishFailed when the broker cannot take the batch)."""
        from surehand.queue.celery_app import SessionMessage, publish_sessions

        messages = [SessionMessage(t.task_id, t.fields.recipient, t.fields.priority) for t in batch]
        publish_sessions(self.celery, messages)

    def notify_hold(self, held: Iterable[Mapping[str, Any]]) -> None:
        """Send a hold notice per held TASK, so Flower shows them (a Celery task each)."""
        from surehand.queue.notices import send_hold_notices

        send_hold_notices(self.celery, list(held))

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

    def close(self) -> None:
        """Release the store's pools, the Redis client and Celery's broker connections."""
        self.stop_publishing()
        self._finalizer()


class BackgroundPublisher(Protocol):
    """What publishes the outbox in the background: a thread or a child process."""

    def start(self) -> None: ...
    def wake(self) -> bool: ...
    def stop(self, timeout: float = 10.0) -> None: ...


class _OutboxSlot:
    """The background publisher of a runtime, if one runs; what its services wake."""

    def __init__(self) -> None:
        self.publisher: BackgroundPublisher | None = None

    def wake(self) -> bool:
        publisher = self.publisher
        return publisher is not None and publisher.wake()


def session_door(services: Callable[[], Services] | None = None) -> SessionDoorFactory | None:
    """The session MCP server of this process for command agents; None when the ``mcp`` extra
    is missing. ``services``: the store and settings it serves on (a runtime's); None: those
    of a runtime on the settings an agent asks with, built when one first asks (an agent made
    without a runtime: ``surehand check``'s)."""
    try:
        from surehand.mcp.session_server import SessionMcp
    except ImportError:
        return None
    if services is None:
        return lambda settings: SessionMcp.shared(Runtime(settings).services)
    return lambda _settings: SessionMcp.shared(services())


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


def _alive(owner: weakref.ReferenceType[Runtime]) -> Runtime:
    found = owner()
    if found is None:
        raise ConfigError("the runtime that registered this Celery app was closed and dropped")
    return found
