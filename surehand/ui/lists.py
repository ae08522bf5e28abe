"""The console's lists: the board, one bucket's pages, the held queue and the go-to box.

Everything is filtered, searched, counted and paged by the store (``Surehand.find_tasks``,
``count_tasks``, ``held``), over every TASK of the tenant: the board shows each bucket's exact
count (or, for a text search, the matches among its newest SUREHAND_SEARCH_SCAN_ROWS, an honest
lower bound past them) and its newest TASKs, and each bucket's list pages through all of them by
keyset, with no OFFSET and no gaps (a search's page that stopped at its bound goes on from there).
Text searches are rate-limited per principal (``list_routes``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from surehand.call_requests import CASE_ID_RE
from surehand.errors import NotFound, SurehandError
from surehand.facade import Surehand
from surehand.model import Attempt, Bucket, InterruptionCase, Task
from surehand.model.listing import Count, Page
from surehand.requests import TASK_ID_RE

PER_COLUMN = 12  # TASKs a board column shows; its list shows the rest
PER_PAGE = 50
HELD_ON_BOARD = 10
PRIORITIES = ("P0", "P1", "P2", "P3")
_SUBMISSION = re.compile(r"\A[A-Za-z0-9._:-]{1,255}\Z")


@dataclass(frozen=True)
class Wanted:
    """The filters as given in the query string (validated by the store's request model)."""

    recipient: str = ""
    priority: str = ""
    text: str = ""

    def search(self) -> dict[str, Any]:
        """Keyword arguments of ``Surehand.find_tasks`` / ``count_tasks``."""
        return {
            "recipient": self.recipient.strip() or None,
            "priority": self.priority or None,
            "text": self.text,
        }

    def query(self, **more: str) -> dict[str, str]:
        """The query string that keeps these filters (for links)."""
        given = {"recipient": self.recipient, "priority": self.priority, "q": self.text}
        return {key: value for key, value in {**given, **more}.items() if value}

    @property
    def any(self) -> bool:
        return bool(self.recipient.strip() or self.priority or self.text.strip())


@dataclass(frozen=True)
class Column:
    """One bucket on the board: how many match and the newest of them."""

    bucket: str
    count: Count
    tasks: list[Task]

    @property
    def more(self) -> int:
        return max(0, self.count.value - len(self.tasks))


@dataclass(frozen=True)
class HeldItem:
    case: InterruptionCase
    task: Task


@dataclass(frozen=True)
class Board:
    columns: list[Column]
    held: list[HeldItem]


def board(sh: Surehand, wanted: Wanted) -> Board:
    """Every bucket's count and newest TASKs, and the held cases most urgent first."""
    counts = sh.count_tasks(**wanted.search())
    columns = [
        Column(
            bucket.value,
            counts[bucket],
            sh.find_tasks(bucket=bucket, limit=PER_COLUMN, **wanted.search()).tasks,
        )
        for bucket in Bucket
    ]
    return Board(columns, held(sh, HELD_ON_BOARD))


def bucket_page(
    sh: Surehand, bucket: Bucket, wanted: Wanted, after: str | None, before: str | None
) -> tuple[Page, Count]:
    """One page of a bucket's matching TASKs and how many match in all."""
    page = sh.find_tasks(
        bucket=bucket, after=after, before=before, limit=PER_PAGE, **wanted.search()
    )
    return page, sh.count_tasks(**wanted.search())[bucket]


def held(sh: Surehand, limit: int = 200) -> list[HeldItem]:
    """Cases held for review with their TASKs: P0 first, then the longest waiting."""
    return [HeldItem(case, task) for case, task in sh.held(limit)]


def locate(sh: Surehand, ref: str) -> str | None:
    """The console path of a TASK id, case id or submission id (None: no such thing here; the
    caller searches for it instead)."""
    ref = ref.strip()
    upper = ref.upper()
    if TASK_ID_RE.match(upper):
        return _found(lambda: sh.get_task(upper).task_id, "tasks")
    if CASE_ID_RE.match(upper):
        return _found(lambda: sh.case(upper).case_id, "cases")
    if _SUBMISSION.match(ref):
        return _found(lambda: sh.diagnose_submission(ref).task_id, "tasks")
    return None


def _found(read: Any, kind: str) -> str | None:
    try:
        return f"{kind}/{read()}"
    except NotFound:
        return None


@dataclass(frozen=True)
class Session:
    """A running session as the store and Redis see it."""

    attempt: Attempt
    lease_left_ms: int | None  # None: no lease in Redis (lost, or about to be judged)
    last_heartbeat: datetime | None  # the renewal the lease's remaining TTL implies


@dataclass(frozen=True)
class Workers:
    """The workers-and-sessions page: what Flower cannot show."""

    running: list[Session]
    lost: list[Attempt]
    last_pass: datetime | None
    pass_seconds: float | None
    redis_error: str | None
    lease_ttl: float


def workers(sh: Surehand) -> Workers:
    """This tenant's live sessions with their leases and last heartbeats, its lost sessions,
    and when the reconciler last ran (any process's pass, from Redis)."""
    running, lost = sh.sessions()
    ttl = sh.settings.lease_ttl_seconds
    try:
        left = sh.leases.remaining_ms([attempt.task_id for attempt in running])
        noted = sh.leases.last_pass()
    except SurehandError as error:  # Redis down: the store's half of the page still helps
        sessions = [Session(attempt, None, None) for attempt in running]
        return Workers(sessions, lost, None, None, error.message, ttl)
    now = datetime.now(UTC)
    sessions = [
        Session(attempt, left.get(attempt.task_id), _renewed(now, ttl, left.get(attempt.task_id)))
        for attempt in running
    ]
    at = datetime.fromtimestamp(noted[0], UTC) if noted else None
    return Workers(sessions, lost, at, noted[1] if noted else None, None, ttl)


def _renewed(now: datetime, ttl: float, left_ms: int | None) -> datetime | None:
    # A renewal sets the TTL back to its full length: the time since is what has run off.
    if left_ms is None:
        return None
    return now - timedelta(seconds=max(0.0, ttl - left_ms / 1000))
