"""``surehand check``'s dispatch lines: TASKs that cannot be dispatched, and roles whose TASKs
no worker has claimed for longer than the back-off (``republish_after_seconds``).

Both are warnings, not failures: they say what to fix in the data or the deployment, while the
configuration itself can run. Where the broker is shared (not ``memory://``), Celery's
``inspect active_queues`` says whether any running worker consumes the role's queue at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from sqlalchemy.exc import SQLAlchemyError

from surehand.config import Settings
from surehand.dispatcher import dispatch, health
from surehand.errors import SurehandError
from surehand.facade import Surehand
from surehand.model import Task
from surehand.queue.celery_app import MEMORY_BROKER, make_celery, queue_for_role

INSPECT_TIMEOUT_S = 1.0
SAMPLE = 3


class Finding(NamedTuple):
    """One line of ``surehand check`` (its ``Check`` fields: name, status, detail, fix)."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str


def check_dispatch(settings: Settings) -> list[Finding]:
    """Undispatchable TASKs, and roles with TASKs unclaimed for long; nothing when all is well
    (or when the store cannot be read: the database checks say why)."""
    sh = Surehand(settings=settings)
    try:
        marked = dispatch.undispatchable(sh.services, limit=SAMPLE)
        count = health.count_undispatchable(sh.services)
        unclaimed = dispatch.unclaimed_roles(sh.services)
    except (SurehandError, SQLAlchemyError):
        return []
    finally:
        sh.close()
    found = [_undispatchable(marked, count)] if count else []
    if unclaimed:
        served = _served_queues(settings)
        found += [_unclaimed(item, served, settings) for item in unclaimed]
    return found


def _undispatchable(sample: Sequence[Task], count: int) -> Finding:
    shown = "; ".join(f"{task.task_id} ({task.dispatch_error})" for task in sample)
    return Finding(
        "undispatchable",
        "warn",
        f"{count} TASK(s) cannot be dispatched and are skipped by the sweep: {shown}",
        "see `surehand show TASK-…`; fix what its error names (a role code, the broker), then "
        "restart `surehand up` or wait for the retry (SUREHAND_REPUBLISH_AFTER_SECONDS)",
    )


def _unclaimed(
    item: dispatch.UnclaimedRole, served: set[str] | None, settings: Settings
) -> Finding:
    minutes = int(settings.republish_after_seconds // 60) or 1
    waiting = f"{item.count} TASK(s) for role {item.role} unclaimed in inbox for over {minutes} min"
    if served is None:
        why = f"no running worker serves role {item.role}, or all of its workers are busy"
    elif _queue(item.role) in served:
        why = f"workers consume {_queue(item.role)} but have not claimed them (all busy?)"
    else:
        why = f"no running worker consumes {_queue(item.role)} (asked Celery inspect)"
    return Finding(
        f"role {item.role}",
        "warn",
        f"{waiting} (oldest created {item.oldest_created_at:%Y-%m-%d %H:%M} UTC): {why}",
        f"start a worker for it: `surehand worker --roles {item.role}` (with `surehand up`: "
        "register an agent for the role in SUREHAND_AGENTS)",
    )


def _queue(role: str) -> str:
    try:
        return queue_for_role(role)
    except SurehandError:
        return f"surehand.{role}"


def _served_queues(settings: Settings) -> set[str] | None:
    """Queue names running workers consume (Celery inspect), or None where that cannot be
    known: no shared broker (``up``'s in-process queue), the broker did not answer, or no
    worker did (none runs, or their remote control is off: either way, say nothing sure)."""
    if not settings.broker_url or settings.broker_url.startswith(MEMORY_BROKER.rstrip("/")):
        return None
    app = make_celery(settings)
    try:
        replies = app.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}
    except Exception:  # kombu/redis errors while broadcasting: unknown, not "unserved"
        return None
    finally:
        app.close()
    if not replies:
        return None
    return {queue["name"] for queues in replies.values() for queue in queues}
