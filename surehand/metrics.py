"""Prometheus metrics shared by the doors, the worker and the reconciler (prometheus-client).

Counters live in the default registry of the process that counts them, registered when it
first counts (or is scraped): in a multi-process deployment every process exposes its own
numbers and Prometheus sums them, and a process that counts nothing (``surehand tasks``) never
imports prometheus_client. The API and ``surehand up`` serve them at ``/metrics``; a ``surehand
worker`` serves them on ``SUREHAND_METRICS_PORT`` when that is set (:mod:`surehand.metrics_port`,
compose/DEPLOYMENT.md).

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
token) once it has API tokens, and a token-less API counts every tenant as ``_all`` for its
loopback readers. A worker's metrics port asks for ``SUREHAND_METRICS_TOKEN`` when it is set.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from surehand.errors import SurehandError

if TYPE_CHECKING:  # imported when first used: a process that only reads (`surehand tasks`)
    # never pays for prometheus_client (its exposition imports an HTTP server) or the store
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import Metric

    from surehand.store import Store

SESSION_TASK = "surehand.run_session"


@dataclass(frozen=True)
class _Meters:
    """This process's counters, in prometheus_client's default registry."""

    submissions: Counter
    sessions: Counter
    lost_sessions: Counter
    admissions: Counter
    lease_renew_failures: Counter
    fenced_writes: Counter
    reconcile_seconds: Histogram
    dispatch_failures: Counter
    undispatchable: Gauge
    agent_tokens: Counter
    agent_cost: Counter


@functools.cache
def _meters() -> _Meters:
    """The counters, registered on first use (once per process)."""
    from prometheus_client import Counter, Gauge, Histogram

    return _Meters(
        submissions=Counter(
            "surehand_submissions_total",
            "write_task calls by disposition (created, reused, conflict).",
            ["disposition"],
        ),
        sessions=Counter(
            "surehand_sessions_total",
            "Sessions run by this process, by outcome (settled, failed, lease_lost, stale, ...).",
            ["outcome"],
        ),
        lost_sessions=Counter(
            "surehand_lost_sessions_total", "Running attempts the reconciler marked SESSION_LOST."
        ),
        admissions=Counter(
            "surehand_admissions_total",
            "Recovery admission decisions by disposition.",
            ["disposition"],
        ),
        lease_renew_failures=Counter(
            "surehand_lease_renew_failures_total",
            "Lease renewals that were refused or could not reach Redis.",
        ),
        fenced_writes=Counter(
            "surehand_fenced_writes_total",
            "Session writes refused because their attempt no longer owns the TASK "
            "(stale_owner); the TASK's history keeps the first of each attempt as a "
            "stale_owner_fenced event.",
        ),
        reconcile_seconds=Histogram(
            "surehand_reconcile_pass_seconds",
            "Wall time of one reconciler pass.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
        ),
        dispatch_failures=Counter(
            "surehand_dispatch_failures_total",
            "Publishes of a TASK that failed, by reason: invalid_role and publish_error mark "
            "the TASK undispatchable; publish_failed (broker unreachable) is retried by the "
            "next sweep.",
            ["reason"],
        ),
        undispatchable=Gauge(
            "surehand_undispatchable_tasks",
            "TASKs marked undispatchable, as the last dispatcher sweep of this process counted "
            "them.",
        ),
        agent_tokens=Counter(
            "surehand_agent_tokens_total",
            "Tokens the agent CLIs of this worker's sessions reported, by role, model and kind "
            "(input, output, cache_read, cache_creation).",
            ["role", "model", "kind"],
        ),
        agent_cost=Counter(
            "surehand_agent_cost_usd_total",
            "Cost in USD the agent CLIs of this worker's sessions reported (Claude Code; Codex "
            "reports none), by role and model.",
            ["role", "model"],
        ),
    )


def register() -> None:
    """Register this process's counters now (a scrape then names every one, counted or not)."""
    _meters()


def observe_submission(disposition: str) -> None:
    """One write_task call ended with ``disposition``."""
    _meters().submissions.labels(disposition).inc()


def observe_session(outcome: str) -> None:
    """One session ended with ``outcome``."""
    _meters().sessions.labels(outcome).inc()


def observe_admission(disposition: str) -> None:
    """One admission decision outside a reconciler pass (recover, review)."""
    _meters().admissions.labels(disposition).inc()


def observe_fenced_write() -> None:
    """A stale attempt's write was refused."""
    _meters().fenced_writes.inc()


def observe_renew_failures(count: int) -> None:
    """A session ended after ``count`` refused or unreachable lease renewals."""
    if count > 0:
        _meters().lease_renew_failures.inc(count)


def observe_dispatch_failure(reason: str) -> None:
    """One publish of a TASK failed for ``reason`` (invalid_role, publish_error, ...)."""
    _meters().dispatch_failures.labels(reason).inc()


def observe_undispatchable(count: int) -> None:
    """The dispatcher sweep counted ``count`` TASKs marked undispatchable."""
    _meters().undispatchable.set(count)


def observe_agent_usage(role: str, usage: Any) -> None:
    """An attempt's agent CLI reported ``usage`` (``Attempt.details``; None: nothing)."""
    if not isinstance(usage, Mapping):
        return
    meters = _meters()
    model = _label(usage.get("model"))
    for kind in ("input", "output", "cache_read", "cache_creation"):
        count = usage.get(f"{kind}_tokens")
        if isinstance(count, int | float) and count > 0:
            meters.agent_tokens.labels(role, model, kind).inc(count)
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and cost > 0:
        meters.agent_cost.labels(role, model).inc(cost)


def _label(value: Any) -> str:
    """A model name as a label: what the CLI printed, limited to a sane name."""
    text = "".join(c for c in str(value or "unknown") if c.isalnum() or c in "._:-")
    return text[:64] or "unknown"


def observe_pass(seconds: float, lost: int, admissions: Mapping[str, int]) -> None:
    """Record one reconciler pass (its PassReport's numbers)."""
    meters = _meters()
    meters.reconcile_seconds.observe(seconds)
    if lost:
        meters.lost_sessions.inc(lost)
    for disposition, count in admissions.items():
        meters.admissions.labels(disposition).inc(count)


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
        from prometheus_client.core import GaugeMetricFamily

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
        from sqlalchemy import func, select

        from surehand.store.schema import tasks as tasks_table

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
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(TaskCounts(store, tenants=tenants))
    return registry


def exposition(*extra: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of this process's metrics (and ``extra``) and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    register()  # every counter named, even those nothing counted yet
    payload = generate_latest(REGISTRY) + b"".join(generate_latest(r) for r in extra)
    return payload, CONTENT_TYPE_LATEST


def token_matches(expected: str, authorization: str | None) -> bool:
    """True if ``authorization`` is ``Bearer <expected>`` (constant-time comparison)."""
    scheme, _, presented = (authorization or "").partition(" ")
    if not expected or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(expected.encode(), presented.strip().encode())


def _count_session(sender: Any = None, retval: Any = None, **_: Any) -> None:
    """Count a finished ``surehand.run_session`` by the outcome in its return value."""
    if getattr(sender, "name", None) != SESSION_TASK:
        return
    outcome = retval.get("outcome") if isinstance(retval, dict) else None
    observe_session(str(outcome) if outcome else "error")


def connect_celery_signals() -> None:
    """Count finished sessions from Celery's signals (idempotent). Called where the session
    tasks are registered on an app, so a process that never builds one -- ``surehand tasks``
    -- does not import Celery to count nothing. (A worker's metrics port:
    :func:`surehand.metrics_port.serve_when_ready`.)"""
    from celery.signals import task_postrun

    task_postrun.connect(_count_session, weak=False, dispatch_uid="surehand.metrics.sessions")
