"""Parents that wait for their children without holding a worker, through one worker pool.

    python bench/sessions/delegation.py [--parents 1000] [--children 10] [--concurrency 8]

A ``surehand worker`` (roles PM and DEV, ``--concurrency`` threads) on Postgres (its own
database ``surehand_bench_delegation``) and a private ``redis-server``. Each PM TASK delegates
``--children`` DEV children and waits for them (``ctx.wait_for``: its attempt ends, its lease
and slot are released); this process approves each child as it reaches review (its move to
done), and the last approval of a parent's children queues the parent again. Measured: the time
from a parent's last child done (the approval committed) to its successor running (the PM's
``resumed`` stamp), p50/p99; and, from the store, how many PM attempts were running while one
of their children ran (a waiting parent holding a slot would show here). Printed as a table and
saved to ``bench/results/delegation-<UTC>.json``. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import select

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.databases import fresh_database
from bench.common.procs import machine, stop_group
from bench.common.results import save
from bench.common.services import RedisServer, spawn_argv
from surehand.facade import Surehand
from surehand.model import Bucket
from surehand.store import Store
from surehand.store import schema as tables

REPO = Path(__file__).resolve().parents[2]
AGENTS = "bench.sessions.delegation_agents"
ADMIN_URL = os.environ.get(
    "BENCH_ADMIN_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def stamps(path: Path) -> dict[tuple[str, str], float]:
    lines = path.read_text().splitlines() if path.exists() else []
    found = [json.loads(line) for line in lines if line.strip()]
    return {(s["task"], s["what"]): float(s["at"]) for s in found}


def approve_ready(sh: Surehand, done_at: dict[str, float]) -> int:
    """Approve every DEV child in review; remember when each approval committed."""
    waiting = sh.list_tasks(bucket=Bucket.REVIEW, recipient="DEV", limit=1000)
    for task in waiting:
        sh.transition(task.task_id, "approve", actor="PM")
        done_at[task.task_id] = time.time()
    return len(waiting)


def overlaps(store: Store) -> int:
    """PM attempts that were running while one of their children's attempts ran."""
    a, t = tables.attempts, tables.tasks
    with store.snapshot() as connection:
        rows = connection.execute(
            select(a.c.task_id, a.c.started_at, a.c.ended_at, t.c.parent, t.c.recipient).join(
                t, t.c.task_id == a.c.task_id
            )
        ).all()
    spans: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if row.recipient == "PM":
            end = row.ended_at.timestamp() if row.ended_at else float("inf")
            spans.setdefault(row.task_id, []).append((row.started_at.timestamp(), end))
    count = 0
    for row in rows:
        if row.recipient != "DEV" or row.ended_at is None:
            continue
        start, end = row.started_at.timestamp(), row.ended_at.timestamp()
        count += sum(1 for s, e in spans.get(row.parent, []) if s < end and start < e)
    return count


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    url = fresh_database(ADMIN_URL, "surehand_bench_delegation").render_as_string(
        hide_password=False
    )
    Store(url, auto_upgrade=True).ensure_schema()
    redis = RedisServer(work)
    stamp_file = work / "stamps.jsonl"
    env = {
        **os.environ,
        "SUREHAND_DATABASE_URL": url,
        "SUREHAND_BROKER_URL": redis.url(0),
        "SUREHAND_REDIS_URL": redis.url(1),
        "SUREHAND_AGENTS": f"PM={AGENTS}:pm,DEV={AGENTS}:child",
        "SUREHAND_WORK_DIR": str(work / "sessions"),
        "SUREHAND_HOME": str(work / "home"),
        "SUREHAND_LOGLEVEL": "warning",
        "PYTHONPATH": str(REPO),
        "BENCH_DELEGATION_STAMPS": str(stamp_file),
        "BENCH_DELEGATION_CHILDREN": str(args.children),
    }
    worker = spawn_argv(
        [
            *(sys.executable, "-m", "surehand", "worker", "--roles", "PM,DEV"),
            *("--concurrency", str(args.concurrency), "--loglevel", "warning"),
        ],
        env,
        work / "worker.log",
    ).process
    sh = Surehand(database_url=url, broker_url=redis.url(0), redis_url=redis.url(1))
    done_at: dict[str, float] = {}
    try:
        started = time.time()
        parents = [
            sh.write_task(sender="ADMIN", recipient="PM", subject=f"plan {n}").task_id
            for n in range(args.parents)
        ]
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            if approve_ready(sh, done_at) == 0:
                found = stamps(stamp_file)
                if all((p, "resumed") in found for p in parents):
                    break
                time.sleep(0.05)
        elapsed = time.time() - started
    finally:
        stop_group(worker)
        sh.close()
        redis.stop()
    found = stamps(stamp_file)
    store = Store(url)
    with store.snapshot() as connection:
        kids = connection.execute(
            select(tables.tasks.c.task_id, tables.tasks.c.parent).where(
                tables.tasks.c.recipient == "DEV"
            )
        ).all()
    last_done: dict[str, float] = {}
    for kid in kids:
        if kid.task_id in done_at:
            last_done[kid.parent] = max(last_done.get(kid.parent, 0.0), done_at[kid.task_id])
    latencies = [
        found[(p, "resumed")] - last_done[p]
        for p in parents
        if (p, "resumed") in found and p in last_done
    ]
    result = {
        "parents": args.parents,
        "children_per_parent": args.children,
        "concurrency": args.concurrency,
        "children_created": len(kids),
        "parents_resumed": len(latencies),
        "seconds": round(elapsed, 1),
        "pm_attempts_running_beside_their_children": overlaps(store),
        "last_child_done_to_successor_running_ms": {
            "p50": round(1000 * percentile(latencies, 0.50), 1),
            "p99": round(1000 * percentile(latencies, 0.99), 1),
            "max": round(1000 * max(latencies), 1) if latencies else None,
            "mean": round(1000 * statistics.fmean(latencies), 1) if latencies else None,
        },
    }
    store.dispose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parents", type=int, default=1000)
    parser.add_argument("--children", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-delegation-") as tmp:
        result = run(args, Path(tmp))
    table = Table(title="Parents waiting for their children (one worker pool)")
    for column in ("parents x children", "slots", "resumed", "seconds", "overlaps", "p50 ms"):
        table.add_column(column)
    table.add_column("p99 ms")
    latency = result["last_child_done_to_successor_running_ms"]
    table.add_row(
        f"{result['parents']} x {result['children_per_parent']}",
        str(result["concurrency"]),
        str(result["parents_resumed"]),
        str(result["seconds"]),
        str(result["pm_attempts_running_beside_their_children"]),
        str(latency["p50"]),
        str(latency["p99"]),
    )
    Console().print(table)
    save("delegation", {"result": result, "machine": machine()})


if __name__ == "__main__":
    main()
