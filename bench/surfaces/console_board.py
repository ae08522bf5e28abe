"""Benchmark the review console's pages with 100,000 TASKs (issue 20; target: board <= 50 ms).

    python bench/surfaces/console_board.py [--tasks N] [--runs N] [--no-postgres]

A store is seeded in bulk (SQLAlchemy Core ``INSERT``s, no service calls) with ``--tasks``
TASKs of tenant ``acme`` -- 40 % in inbox, 5 % active, 10 % review, 35 % done, 10 % archive,
recipients DEV/QA/OPS, priorities P0-P3 -- plus 10 % as many of tenant ``globex``, and 20 of
acme's active TASKs held for review with their open cases. Both databases are ANALYZEd.

Each page is requested ``--runs`` times (after two warm-ups) through the API's ASGI app in this
process (Starlette's test client: no network, no other process), signed in as acme's PM; the
time is the server's, from request to the last byte of the rendered page. Reported: median and
p95 in milliseconds, per page and database, and the minimum (on a machine shared with other
work, the least a request took is the closest to its cost on an idle one):

  board            ``/ui/``: five exact bucket counts, each bucket's newest TASKs, held first
  board, one role  ``/ui/?recipient=qa``
  board, search    ``/ui/?q=...``: a text search, reading each bucket's newest
                   SUREHAND_SEARCH_SCAN_ROWS (5,000) TASKs (before issue 30: every body, with
                   counts capped at 1,000 matches); a principal may run 60 a minute, more than
                   ``--runs`` + 2
  list, deep page  ``/ui/list/done?after=<cursor 30,000 TASKs deep>``
  held             ``/ui/held``

Side by side, in the same rounds: the board's data as the old console read it (the newest 300
TASKs of each bucket through ``list_tasks``, filtered in Python; its counts were "300+"), so the
ratio shows what reading every TASK's count costs against reading a fixed window.

The Postgres admin URL comes from ``SUREHAND_BENCH_DATABASE_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``); the bench creates and drops its own
database ``surehand_bench_console``. Results are printed as a rich table and saved to
``bench/results/console-<UTC>.json``. A benchmark, not a test: it asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from rich.console import Console
from rich.table import Table
from sqlalchemy import insert, text

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.databases import fresh_database
from bench.common.results import save
from bench.common.seeding import seeded_task
from surehand import Surehand
from surehand.api import create_app
from surehand.config import Settings
from surehand.model import Bucket
from surehand.store import Store
from surehand.store import schema as tables

T0 = datetime(2026, 6, 1, tzinfo=UTC)
BATCH = 5000
TOKEN = "bench-pm-token-0123456789"
SHARES = ((Bucket.INBOX, 40), (Bucket.ACTIVE, 5), (Bucket.REVIEW, 10), (Bucket.DONE, 35))
HELD = 20


def bucket_of(n: int) -> Bucket:
    slot, start = n % 100, 0
    for bucket, share in SHARES:
        if slot < start + share:
            return bucket
        start += share
    return Bucket.ARCHIVE


def task_row(n: int, tenant: str) -> dict[str, Any]:
    at = T0 + timedelta(seconds=n * 7)
    task_id = f"TASK-{at:%Y%m%d}-{1 if tenant == 'acme' else 2}{n:07d}"
    bucket = bucket_of(n)
    return seeded_task(
        task_id=task_id,
        tenant=tenant,
        recipient=("DEV", "QA", "OPS")[n % 3],
        subject=f"Chore {n:06d} for the {('web', 'api', 'billing')[n % 3]} team",
        body=f"Work item {n}: check the logs, fix what is broken, report what you did. " * 3,
        priority=f"P{n % 4}",
        bucket=bucket.value,
        revision=1,
        epoch=0 if bucket is Bucket.INBOX else 1,
        hold_case_id=None,
        hold_reason=None,
        client_submission_id=f"sub-{tenant}-{n}",
        document="",
        published_at=at,
        created_at=at,
        updated_at=at,
        dispatch_error=None,
        dispatch_error_at=None,
    )


def seed(store: Store, count: int) -> None:
    rows = [task_row(n, "acme") for n in range(count)]
    rows += [task_row(n, "globex") for n in range(count // 10)]
    held = [row for row in rows if row["tenant"] == "acme" and row["bucket"] == "active"][:HELD]
    attempts, cases = [], []
    for row in held:
        case_id = f"CASE-{row['task_id'].removeprefix('TASK-')}-1"
        row.update(hold_case_id=case_id, hold_reason="open intent without key or probe")
        attempts.append(_attempt(row["task_id"]))
        cases.append(_case(row["task_id"], case_id, attempts[-1]["attempt_id"]))
    _insert(store, tables.tasks, rows)
    _insert(store, tables.attempts, attempts)
    _insert(store, tables.interruption_cases, cases)
    # VACUUM too on Postgres: index-only scans (the board's counts) need the visibility map,
    # as a table that autovacuum has seen has it.
    vacuum = "VACUUM ANALYZE" if store.dialect == "postgresql" else "ANALYZE"
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text(vacuum))


def _attempt(task_id: str) -> dict[str, Any]:
    return {
        "attempt_id": f"att-{task_id}",
        "task_id": task_id,
        "number": 1,
        "state": "SESSION_LOST",
        "worker": "bench",
        "lease_id": f"att-{task_id}",
        "agent_returned": False,
        "started_at": T0,
        "ended_at": T0,
        "cause": "session_lost",
    }


def _case(task_id: str, case_id: str, attempt_id: str) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "task_id": task_id,
        "interrupted_attempt_id": attempt_id,
        "interrupted_epoch": 1,
        "prior_lease_id": attempt_id,
        "interrupted_at": T0,
        "revision_at_interruption": 1,
        "effect_fact": "unknown",
        "effect_refs": {"why": "open intent without key or probe"},
        "admission": "hold_for_review",
        "decided_at": T0,
        "decided_by": "reconciler",
        "state": "open",
    }


def _insert(store: Store, table: Any, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), BATCH):
        with store.engine.begin() as connection:
            connection.execute(insert(table), rows[start : start + BATCH])


def signed_in(sh: Surehand) -> TestClient:
    client = TestClient(create_app(sh), base_url="http://127.0.0.1", follow_redirects=False)
    form = client.get("/ui/sign-in").text
    found = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert found is not None
    client.post("/ui/sign-in", data={"token": TOKEN, "csrf_token": found.group(1)})
    return client


def old_board(sh: Surehand) -> None:
    """The board's data as the console read it before: the newest 300 of each bucket."""
    for bucket in Bucket:
        found = sh.list_tasks(bucket=bucket, limit=300)
        _kept = [task for task in found if "chore" in task.fields.subject.casefold()]


def timed(call: Callable[[], object], runs: int) -> list[float]:
    for _ in range(2):
        call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def measure(url: str, runs: int) -> dict[str, dict[str, float]]:
    settings = Settings(database_url=url, tenant="acme", api_tokens=f"{TOKEN}=pm:PM:acme")
    with Surehand(settings=settings) as sh:
        client = signed_in(sh)
        after = sh.find_tasks(bucket=Bucket.DONE, limit=500).older
        for _ in range(min(59, sh.count_tasks()[Bucket.DONE].value // 500 - 2)):
            assert after is not None  # 30,000 TASKs deep (with 100,000 seeded)
            after = sh.find_tasks(bucket=Bucket.DONE, after=after.encode(), limit=500).older
        assert after is not None
        pages: dict[str, Callable[[], object]] = {
            "board": lambda: _ok(client.get("/ui/")),
            "old board data (newest 300 per bucket)": lambda: old_board(sh),
            "board, one role": lambda: _ok(client.get("/ui/?recipient=qa")),
            "board, search": lambda: _ok(client.get("/ui/?q=chore 04242")),
            "list, 30,000 deep": lambda: _ok(client.get(f"/ui/list/done?after={after.encode()}")),
            "held": lambda: _ok(client.get("/ui/held")),
        }
        return {name: _summary(timed(call, runs)) for name, call in pages.items()}


def _ok(response: Any) -> None:
    assert response.status_code == 200, response.text[:500]


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "min_ms": round(ordered[0], 2),
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 2),
        "runs": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as home:
        urls = {"sqlite": f"sqlite:///{home}/bench.sqlite3"}
        if not args.no_postgres:
            admin = os.environ.get(
                "SUREHAND_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
            )
            urls["postgres"] = fresh_database(admin, "surehand_bench_console").render_as_string(
                hide_password=False
            )
        for name, url in urls.items():
            store = Store(url, auto_upgrade=True)
            store.upgrade()
            started = time.perf_counter()
            seed(store, args.tasks)
            print(f"{name}: seeded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            store.dispose()
            results[name] = measure(url, args.runs)
    report(results, args)


def report(results: dict[str, Any], args: argparse.Namespace) -> None:
    table = Table(title=f"console pages, {args.tasks:,} TASKs of one tenant (server time, ms)")
    table.add_column("page")
    for name in results:
        table.add_column(f"{name} min / median / p95")
    for page in next(iter(results.values())):
        cells = [
            f"{r[page]['min_ms']} / {r[page]['median_ms']} / {r[page]['p95_ms']}"
            for r in results.values()
        ]
        table.add_row(page, *cells)
    ratio = {
        name: round(
            r["board"]["median_ms"] / r["old board data (newest 300 per bucket)"]["median_ms"], 2
        )
        for name, r in results.items()
    }
    Console().print(table)
    Console().print(f"board ÷ old board data (same rounds): {ratio}")
    document = {
        "bench": "console",
        "tasks": args.tasks,
        "runs": args.runs,
        "target": "board <= 50 ms server time",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load": os.getloadavg(),
        },
        "results": results,
        "board_over_old_board_data": ratio,
    }
    save("console", document)


if __name__ == "__main__":
    main()
