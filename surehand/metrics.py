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
  fails and on every sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery.signals import task_postrun, worker_ready
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

from surehand.config import Settings

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


def exposition() -> tuple[bytes, str]:
    """The text exposition of this process's metrics and its content type."""
    return generate_latest(), CONTENT_TYPE_LATEST


@task_postrun.connect(weak=False)
def _count_session(sender: Any = None, retval: Any = None, **_: Any) -> None:
    """Count a finished ``surehand.run_session`` by the outcome in its return value."""
    if getattr(sender, "name", None) != SESSION_TASK:
        return
    outcome = retval.get("outcome") if isinstance(retval, dict) else None
    observe_session(str(outcome) if outcome else "error")


@worker_ready.connect(weak=False)
def _serve_worker_metrics(**_: Any) -> None:
    """A ``surehand worker`` has no API: serve its counters on SUREHAND_METRICS_PORT if set."""
    settings = Settings()
    if settings.metrics_port:
        start_http_server(settings.metrics_port, addr=settings.metrics_host)
