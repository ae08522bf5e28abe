"""``surehand up``: API, worker, reconciler and dispatcher sweep in one process.

The embedded default needs no services: a SQLite file under ``SUREHAND_HOME``, Celery's
in-process ``memory://`` transport (a queue that exists only inside this process, which is the
point: nothing else can consume it; ``queue.inprocess`` wakes the worker on every publish and
ack instead of kombu's one-second polling sleep), a thread-pool worker, and fakeredis for
leases. TASKs
submitted by other processes (``surehand submit``) have no broker to publish to; the sweep
publishes them here within about a second. With ``SUREHAND_BROKER_URL`` and
``SUREHAND_REDIS_URL`` set, the same process is a worker of a real deployment instead.

Shutdown is a Celery warm shutdown: no new session starts, running sessions finish and
release their leases. A second Ctrl-C exits at once; sessions cut off that way are found lost
by the reconciler of the next run and recovered from their recorded effects.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from surehand.agents.builtin import register_demo
from surehand.config import Settings
from surehand.config.store import DEFAULT_HOME
from surehand.dispatcher import dispatch
from surehand.facade import Surehand

if TYPE_CHECKING:  # Celery and the reconciler are imported by start(): the CLI loads this module
    from surehand.doors.serving import BackgroundServer

log = logging.getLogger(__name__)

_JOIN_TIMEOUT_S = 30.0
PROGRESS_EVERY_S = 5.0

# progress(TASK ids still running, seconds since the shutdown began)
Progress = Callable[[list[str], float], None]


def embedded_settings(settings: Settings) -> Settings:
    """``settings`` with the embedded defaults filled in (memory broker, files under home)."""
    from surehand.queue.celery_app import MEMORY_BROKER

    update: dict[str, object] = {"broker_url": settings.broker_url or MEMORY_BROKER}
    if "work_dir" not in settings.model_fields_set and settings.home != DEFAULT_HOME:
        update["work_dir"] = settings.home / "sessions"
    return settings.model_copy(update=update)


@dataclass
class Embedded:
    """One process running everything; ``start()`` then ``stop()`` (or ``run_until``)."""

    settings: Settings
    host: str = "127.0.0.1"
    port: int = 8000
    concurrency: int = 4
    with_api: bool = True
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.settings = embedded_settings(self.settings)
        self.sh = Surehand(settings=self.settings)
        self.demo_agents = not self.settings.agents
        if self.demo_agents:
            register_demo(self.sh.registry)
        self.roles = self.sh.registry.roles()
        self.api_url: str | None = None
        self._threads: list[threading.Thread] = []
        self._api: BackgroundServer | None = None

    @property
    def memory_broker(self) -> bool:
        """True for the in-process transport (nothing outside this process can consume it)."""
        from surehand.queue.celery_app import MEMORY_BROKER

        return self.settings.broker_url == MEMORY_BROKER

    def start(self) -> None:
        """Migrate (SQLite) or verify the schema, then start every part; raises on failure."""
        self.sh.store.ensure_schema()
        if self.with_api:
            self._start_api()  # first: a taken port should fail before anything else runs
        self._start_worker()
        if self.memory_broker:
            self._republish_inbox()
        from surehand.dispatcher.reconciler import reconcile_loop

        interval = self.settings.reconcile_interval_seconds
        self._spawn(
            "surehand-reconciler", reconcile_loop, self.sh.reconciler, self.stopping, interval
        )
        self._spawn("surehand-sweep", self._sweep_loop)

    def _start_api(self) -> None:
        try:  # the api extra is optional: without it `up` runs everything but HTTP
            from surehand.api import create_app
            from surehand.doors.serving import BackgroundServer
        except ImportError:
            log.warning("no HTTP API: install surehand[api] to serve it (running without)")
            return
        from surehand.doors.auth import Authenticator

        Authenticator(self.settings).check_start(self.host, "the API")
        server = BackgroundServer(
            create_app(self.sh),
            self.host,
            self.port,
            forwarded_allow_ips=self.settings.api_forwarded_allow_ips,
        ).start()
        self._api = server
        self.api_url = server.url

    def _start_worker(self) -> None:
        from surehand.queue.celery_app import DEFAULT_QUEUE, configure_worker_queues

        app = self.sh.celery
        queues = [queue.name for queue in configure_worker_queues(app, self.roles)]
        self.worker = app.WorkController(
            hostname=f"up@{socket.gethostname()}",
            pool_cls="threads",
            concurrency=self.concurrency,
            queues=[*queues, DEFAULT_QUEUE],
            without_mingle=True,
            without_gossip=True,
            without_heartbeat=True,
            send_events=not self.memory_broker,  # nobody can watch an in-process transport
            loglevel="WARNING",
        )
        self._spawn("surehand-worker", self.worker.start)

    def _republish_inbox(self) -> None:
        """Publish every unheld ``inbox`` TASK again: messages a previous ``up`` left in its
        in-memory queue died with it. Duplicates are harmless (claiming is compare-and-set).
        Through the dispatcher's containment: a stored TASK that cannot be dispatched (a role
        code the queue refuses, a publisher error) is marked and reported, and never stops
        this start (it used to: ``invalid role code 'LEAD-QA'``)."""
        republished = dispatch.republish_inbox(self.sh.services)
        if republished:
            log.warning("republished %d waiting TASK(s) from an earlier run", republished)

    def _sweep_loop(self) -> None:
        """Publish TASKs committed by other processes (which had no broker to publish to)."""
        interval = self.settings.sweep_interval_seconds
        while not self.stopping.wait(interval):
            try:
                dispatch.sweep(self.sh.services)
            except Exception:
                log.exception("dispatcher sweep failed; retrying in %.1f s", interval)

    def _spawn(self, name: str, target: Callable[..., object], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def healthy(self) -> bool:
        """Every part still running (a dead worker thread means the process should exit)."""
        return all(thread.is_alive() for thread in self._threads)

    def running_sessions(self) -> list[str]:
        """TASK ids of the sessions this process's worker is running now."""
        from celery.worker import state

        from surehand.queue.celery_app import SESSION_TASK_NAME

        running = [r for r in list(state.active_requests) if r.task_name == SESSION_TASK_NAME]
        return sorted(str(request.args[0]) for request in running if request.args)

    def stop(self, progress: Progress | None = None) -> None:
        """Warm shutdown: stop taking work, let running sessions finish, release everything.

        ``progress(running, waited_s)`` hears the TASK ids still running: at once, whenever
        one finishes, every PROGRESS_EVERY_S seconds meanwhile (``[]`` once none is left)."""
        self.stopping.set()
        if self._api is not None:
            self._api.stop()
        worker = getattr(self, "worker", None)
        if worker is not None:
            if progress is None:
                worker.stop()  # finishes running sessions; each releases its own lease
            else:
                self._watched(worker.stop, progress)
        for thread in self._threads:
            thread.join(_JOIN_TIMEOUT_S)
        self.sh.close()

    def _watched(self, stop_worker: Callable[[], object], progress: Progress) -> None:
        """Run ``stop_worker`` while telling ``progress`` which sessions it waits for."""
        started = time.monotonic()
        done = threading.Event()
        watcher = threading.Thread(
            target=self._report_running, args=(progress, done, started), daemon=True
        )
        watcher.start()
        try:
            stop_worker()
        finally:
            done.set()
            watcher.join(_JOIN_TIMEOUT_S)

    def _report_running(self, progress: Progress, done: threading.Event, started: float) -> None:
        last: list[str] | None = None
        said_at = started
        while True:
            running = [] if done.is_set() else self.running_sessions()
            now = time.monotonic()
            if running != last or now - said_at >= PROGRESS_EVERY_S:
                progress(running, now - started)
                last, said_at = running, now
            if not running and done.is_set():
                return
            done.wait(0.2)
