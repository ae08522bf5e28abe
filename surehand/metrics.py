"""Prometheus metrics shared by the doors, the worker and the reconciler (prometheus-client).

Counters live in the default registry of the process that counts them: in a multi-process
deployment every process exposes its own numbers and Prometheus sums them. The API and
``surehand up`` serve them at ``/metrics``; a ``surehand worker`` serves them on
``SUREHAND_METRICS_PORT`` when that is set (see compose/DEPLOYMENT.md).

Where each number is counted:

* submissions: ``Surehand.write_task`` (every door goes through it);
* sessions by outcome: Celery's ``task_postrun`` signal for ``surehand.run_session`` (the
  session's return value names its outcome), so any worker counts what it ran;
* lost sessions, admissions and pass time: every reconciler pass
  (``Reconciler.run_once``), plus admissions decided by ``recover``/``review`` calls;
* lease renew failures: each session's heartbeat, when the session ends;
* dispatch failures and undispatchable TASKs: the dispatcher (``dispatch.py``), when a publish
  fails and on every sweep;
* TASKs by tenant and bucket: read from the database when the API is scraped
  (:class:`TaskCounts`), so it is the same number in every API process (a gauge, not a sum).

Tenant labels appear only on ``surehand_tasks``; since they show each tenant's volume, the API
serves ``/metrics`` to the operator only (``SUREHAND_METRICS_TOKEN``, never a tenant's API
token) once it has API tokens. A worker's metrics port asks for ``SUREHAND_METRICS_TOKEN`` when
it is set.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import func, select

from surehand.config import Settings
from surehand.doors.auth import is_loopback
from surehand.doors.hosts import SETTING, HostRule
from surehand.doors.throttle import FailureThrottle, fingerprint
from surehand.errors import ConfigError, SurehandError
from surehand.store import Store
from surehand.store.schema import tasks as tasks_table

SESSION_TASK = "surehand.run_session"

SUBMISSIONS = Counter(
    "surehand_submissions_total",
    "write_task calls by disposition (created, reused, conflict).",
    ["disposition"],
)
SESSIONS = Counter(
    "surehand_sessions_total",
    "Sessions run by this process, by outcome (settled, failed, lease_lost, stale, ...).",
    ["outcome"],
)
LOST_SESSIONS = Counter(
    "surehand_lost_sessions_total", "Running attempts the reconciler marked SESSION_LOST."
)
ADMISSIONS = Counter(
    "surehand_admissions_total",
    "Recovery admission decisions by disposition.",
    ["disposition"],
)
LEASE_RENEW_FAILURES = Counter(
    "surehand_lease_renew_failures_total",
    "Lease renewals that were refused or could not reach Redis.",
)
FENCED_WRITES = Counter(
    "surehand_fenced_writes_total",
    "Session writes refused because their attempt no longer owns the TASK (stale_owner); the "
    "TASK's history keeps the first of each attempt as a stale_owner_fenced event.",
)
RECONCILE_SECONDS = Histogram(
    "surehand_reconcile_pass_seconds",
    "Wall time of one reconciler pass.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
DISPATCH_FAILURES = Counter(
    "surehand_dispatch_failures_total",
    "Publishes of a TASK that failed, by reason: invalid_role and publish_error mark the TASK "
    "undispatchable; publish_failed (broker unreachable) is retried by the next sweep.",
    ["reason"],
)
UNDISPATCHABLE = Gauge(
    "surehand_undispatchable_tasks",
    "TASKs marked undispatchable, as the last dispatcher sweep of this process counted them.",
)


def observe_submission(disposition: str) -> None:
    """One write_task call ended with ``disposition``."""
    SUBMISSIONS.labels(disposition).inc()


def observe_session(outcome: str) -> None:
    """One session ended with ``outcome``."""
    SESSIONS.labels(outcome).inc()


def observe_admission(disposition: str) -> None:
    """One admission decision outside a reconciler pass (recover, review)."""
    ADMISSIONS.labels(disposition).inc()


def observe_fenced_write() -> None:
    """A stale attempt's write was refused."""
    FENCED_WRITES.inc()


def observe_renew_failures(count: int) -> None:
    """A session ended after ``count`` refused or unreachable lease renewals."""
    if count > 0:
        LEASE_RENEW_FAILURES.inc(count)


def observe_dispatch_failure(reason: str) -> None:
    """One publish of a TASK failed for ``reason`` (invalid_role, publish_error, ...)."""
    DISPATCH_FAILURES.labels(reason).inc()


def observe_undispatchable(count: int) -> None:
    """The dispatcher sweep counted ``count`` TASKs marked undispatchable."""
    UNDISPATCHABLE.set(count)


def observe_pass(seconds: float, lost: int, admissions: Mapping[str, int]) -> None:
    """Record one reconciler pass (its PassReport's numbers)."""
    RECONCILE_SECONDS.observe(seconds)
    if lost:
        LOST_SESSIONS.inc(lost)
    for disposition, count in admissions.items():
        ADMISSIONS.labels(disposition).inc(count)


MAX_TENANT_LABELS = 100  # tenants beyond the largest 100 are summed under OTHER_TENANTS
OTHER_TENANTS = "_other"
ALL_TENANTS = "_all"  # every tenant as one, for a reader who may not see tenants' names


class TaskCounts:
    """A collector: ``surehand_tasks{tenant, bucket}``, counted in the database per scrape;
    without ``tenants`` every tenant is counted as one (``tenant="_all"``)."""

    def __init__(self, store: Store, *, tenants: bool = True) -> None:
        self.store = store
        self.tenants = tenants

    def collect(self) -> Iterator[Metric]:
        """One gauge family; empty if the database cannot be read right now."""
        family = GaugeMetricFamily(
            "surehand_tasks",
            "TASKs by tenant and bucket, from the database (the same in every API process).",
            labels=["tenant", "bucket"],
        )
        try:
            rows = self._rows()
        except SurehandError:
            return
        if not self.tenants:
            rows = [(ALL_TENANTS, bucket, count) for _tenant, bucket, count in rows]
        for (tenant, bucket), count in _cap_tenants(rows).items():
            family.add_metric([tenant, bucket], count)
        yield family

    def _rows(self) -> list[tuple[str, str, int]]:
        query = select(tasks_table.c.tenant, tasks_table.c.bucket, func.count()).group_by(
            tasks_table.c.tenant, tasks_table.c.bucket
        )
        with self.store.snapshot() as connection:
            return [(str(t), str(b), int(n)) for t, b, n in connection.execute(query)]


def _cap_tenants(rows: Iterable[tuple[str, str, int]]) -> dict[tuple[str, str], int]:
    """Counts by (tenant, bucket), the smaller tenants past MAX_TENANT_LABELS summed."""
    rows = list(rows)
    totals: dict[str, int] = {}
    for tenant, _bucket, count in rows:
        totals[tenant] = totals.get(tenant, 0) + count
    kept = set(sorted(totals, key=lambda t: (-totals[t], t))[:MAX_TENANT_LABELS])
    counts: dict[tuple[str, str], int] = {}
    for tenant, bucket, count in rows:
        key = (tenant if tenant in kept else OTHER_TENANTS, bucket)
        counts[key] = counts.get(key, 0) + count
    return counts


def store_registry(store: Store, *, tenants: bool = True) -> CollectorRegistry:
    """A registry holding the database-backed metrics of ``store`` (one per API app); without
    ``tenants``, no tenant's name."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TaskCounts(store, tenants=tenants))
    return registry


def exposition(*extra: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of this process's metrics (and ``extra``) and its content type."""
    payload = generate_latest(REGISTRY) + b"".join(generate_latest(r) for r in extra)
    return payload, CONTENT_TYPE_LATEST


def token_matches(expected: str, authorization: str | None) -> bool:
    """True if ``authorization`` is ``Bearer <expected>`` (constant-time comparison)."""
    scheme, _, presented = (authorization or "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(expected.encode(), presented.strip().encode())


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def guarded(app: WSGIApp, token: str) -> WSGIApp:
    """``app`` behind ``Authorization: Bearer <token>``: 401 otherwise, and 429 (with
    ``Retry-After``) for a client or a token that keeps failing (:mod:`surehand.doors.throttle`)."""
    throttle = FailureThrottle()

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = environ.get("HTTP_AUTHORIZATION")
        if token_matches(token, header):
            return app(environ, start_response)
        scheme, _, presented = (header or "").partition(" ")
        refusal = None
        if scheme.lower() == "bearer" and presented.strip():
            client = str(environ.get("REMOTE_ADDR", "unknown"))
            refusal = throttle.failed(client, fingerprint(presented.strip()), "metrics token")
        if refusal is not None:
            wait = str(refusal.details["retry_after"])
            start_response("429 Too Many Requests", [*_PLAIN, ("Retry-After", wait)])
            return [f"{refusal.message}\n".encode()]
        start_response("401 Unauthorized", [*_PLAIN, ("WWW-Authenticate", _REALM)])
        return [b"send Authorization: Bearer <SUREHAND_METRICS_TOKEN>\n"]

    return check


_PLAIN = [("Content-Type", "text/plain")]
_REALM = 'Bearer realm="surehand"'


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        return None


def check_port(host: str, token: str) -> None:
    """Refuse a metrics port that anyone on the network could read: off loopback it needs
    ``SUREHAND_METRICS_TOKEN`` (the counters show the deployment's volume)."""
    if host and not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the worker's metrics on {host} without SUREHAND_METRICS_TOKEN: "
            "anyone who can reach the port would read them. Set the token (Prometheus sends it "
            "as a bearer token) or bind SUREHAND_METRICS_HOST=127.0.0.1",
            setting="SUREHAND_METRICS_TOKEN",
        )


def host_checked(app: WSGIApp, hosts: HostRule) -> WSGIApp:
    """``app`` answering only the ``Host`` names of the API's rule (421 otherwise): a web page
    that rebinds its name to this port cannot read it from a browser (DNS rebinding)."""

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if hosts.allows(environ.get("HTTP_HOST")):
            return app(environ, start_response)
        start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
        return [f"this port does not answer to that Host name; add it to {SETTING}\n".encode()]

    return check


def serve_metrics(
    host: str, port: int, token: str = "", hosts: HostRule | None = None
) -> WSGIServer:
    """Serve this process's metrics on ``host:port`` in a daemon thread (token if given; only
    the ``Host`` names ``hosts`` allows, loopback by default). ConfigError for a port off
    loopback without a token (:func:`check_port`)."""
    check_port(host, token)
    app: WSGIApp = make_wsgi_app(REGISTRY)
    if token:
        app = guarded(app, token)
    app = host_checked(app, hosts or HostRule.of(()))
    server = make_server(host, port, app, _Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="surehand-metrics", daemon=True).start()
    return server


def _count_session(sender: Any = None, retval: Any = None, **_: Any) -> None:
    """Count a finished ``surehand.run_session`` by the outcome in its return value."""
    if getattr(sender, "name", None) != SESSION_TASK:
        return
    outcome = retval.get("outcome") if isinstance(retval, dict) else None
    observe_session(str(outcome) if outcome else "error")


def _serve_worker_metrics(**_: Any) -> None:
    """A ``surehand worker`` has no API: serve its counters on SUREHAND_METRICS_PORT if set."""
    settings = Settings()
    if settings.metrics_port:
        hosts = HostRule.from_settings(settings)
        serve_metrics(settings.metrics_host, settings.metrics_port, settings.metrics_token, hosts)


def connect_celery_signals() -> None:
    """Count finished sessions and serve a worker's metrics port from Celery's signals
    (idempotent). Called where the session tasks are registered on an app, so a process that
    never builds one -- ``surehand tasks`` -- does not import Celery to count nothing."""
    from celery.signals import task_postrun, worker_ready

    task_postrun.connect(_count_session, weak=False, dispatch_uid="surehand.metrics.sessions")
    worker_ready.connect(_serve_worker_metrics, weak=False, dispatch_uid="surehand.metrics.serve")
