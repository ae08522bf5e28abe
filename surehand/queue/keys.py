"""Every Redis key surehand reads or writes, in one place.

Redis holds only *liveness* (is a session still running?), never safety: fencing lives in the
store, by epoch (see DESIGN.md section 5). Losing every key below is therefore survivable: the
worst outcome is a conservative ``SESSION_LOST`` followed by evidence-based admission.

Keys we own (``{ns}`` is empty, or the namespace followed by a colon; see :func:`prefix`):

``{ns}lease:{task_id}`` -- string, with a TTL (``PX``).
    Value: the attempt id of the session holding the TASK. Written with ``SET NX PX`` on claim,
    kept alive by the heartbeat with a compare-and-renew script (``PEXPIRE`` only if the value
    is ours), removed with compare-and-delete. A missing key means "no live session"; the
    reconciler confirms that over a grace window before it marks the attempt ``SESSION_LOST``.

``{ns}lease-generation`` -- string, no TTL.
    Value: a random id minted the first time any session needs it. It tells a Redis that lost
    its dataset (restart without persistence, ``FLUSHALL``, failover to an empty replica) from
    a lease that was deleted or expired: if the lease key is gone *and* the generation changed,
    Redis forgot everything and a heartbeat may put its own lease back; if the generation is
    unchanged, the lease was taken from us and that is a loss. Run the lease Redis with
    ``maxmemory-policy noeviction``: an evicted lease is (safely, but needlessly) a loss.

``{ns}reconciler:last-pass`` -- string, a day's TTL.
    Value: ``"<unix time> <seconds>"`` of the last reconciler pass any process ran, for the
    console's workers page. Losing it loses nothing but that line of the page.

Keys owned by kombu when the Celery broker is Redis (we never touch them directly):
``surehand.{ROLE}`` and ``surehand.{ROLE}:{n}`` lists (one per priority step, ``sep=":"``),
``_kombu.binding.*`` sets, and ``unacked*`` structures used for visibility timeouts.
"""

from __future__ import annotations

from collections.abc import Iterable

LEASE_PREFIX = "lease:"
GENERATION_KEY = "lease-generation"
LAST_PASS_KEY = "reconciler:last-pass"


def prefix(namespace: str) -> str:
    """The string every key in ``namespace`` starts with; empty for the default namespace.

    Namespaces keep tests (and co-tenant deployments) isolated on one shared Redis database.
    """
    if not namespace:
        return ""
    if any(ch.isspace() for ch in namespace):
        raise ValueError(f"Redis namespace must not contain whitespace: {namespace!r}")
    return f"{namespace}:"


def last_pass_key(namespace: str = "") -> str:
    return f"{prefix(namespace)}{LAST_PASS_KEY}"


def lease_key(task_id: str, namespace: str = "") -> str:
    """The lease key of one TASK: exactly ``lease:{task_id}`` in the default namespace."""
    return f"{prefix(namespace)}{LEASE_PREFIX}{task_id}"


def lease_keys(task_ids: Iterable[str], namespace: str = "") -> list[str]:
    """Lease keys for many TASKs, in the same order (for batched ``MGET``)."""
    head = f"{prefix(namespace)}{LEASE_PREFIX}"
    return [f"{head}{task_id}" for task_id in task_ids]


def generation_key(namespace: str = "") -> str:
    """The dataset-generation marker of one namespace (see the module docstring)."""
    return f"{prefix(namespace)}{GENERATION_KEY}"


def namespace_pattern(namespace: str) -> str:
    """A ``SCAN MATCH`` pattern for every key of a (non-empty) namespace, used by test cleanup."""
    if not namespace:
        raise ValueError("refusing to build a pattern matching the whole database")
    return f"{prefix(namespace)}*"
