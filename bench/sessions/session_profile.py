"""Where a Postgres session's time goes beyond the floor: cProfile in-process on the runner.

    python bench/sessions/session_profile.py [--sessions N] [--top N]

On a private ``redis-server`` and a Postgres database of its own (``surehand_bench_profile``),
runs ``--sessions`` no-op sessions one after another in this process (``SessionRunner.run``,
as a worker thread does), then as many *floor* operations (``celery_noop.floor``'s body:
INSERT, lease take, lease drop, guarded UPDATE, on a raw psycopg connection and redis-py).
For each: wall and CPU milliseconds per operation, and the part of the wall time spent waiting
for Postgres and Redis replies (the profile's time in the drivers' socket waits); then the
session's profile by function (own time, and cumulative time of surehand's functions) so that
the cost beyond the floor can be named. Saved to ``bench/results/session-profile-<UTC>.json``.
Not a test: nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import redis
from rich.console import Console
from rich.table import Table

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.databases import fresh_database, libpq
from bench.common.procs import machine
from bench.common.results import save, utc_stamp
from bench.common.services import RedisServer
from bench.peers.celery_noop import _LEASE_DROP, _LEASE_TAKE, FLOOR_TABLE_DDL, noop_agent
from bench.sessions.sessions_variants import prepare_backend

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DATABASE = "surehand_bench_profile"
console = Console(width=None if sys.stdout.isatty() else 160)


def profiled(action: Callable[[], None], count: int) -> tuple[dict[str, float], pstats.Stats]:
    profile = cProfile.Profile()
    wall, cpu = time.perf_counter(), time.process_time()
    profile.enable()
    for _ in range(count):
        action()
    profile.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = pstats.Stats(profile)
    waiting = sum(
        row[2]  # own time of the blocking call
        for (filename, _line, name), row in stats.stats.items()  # type: ignore[attr-defined]
        if _is_wait(filename, name)
    )
    return {
        "wall_ms": 1000 * wall / count,
        "cpu_ms": 1000 * cpu / count,
        "waiting_ms": 1000 * waiting / count,
    }, stats


def _is_wait(filename: str, name: str) -> bool:
    """A call that blocks for a server's reply: psycopg's wait, a socket read, a poll."""
    if "psycopg" in filename and name.startswith("wait"):
        return True
    return filename == "~" and any(w in name for w in ("recv", "poll", "wait_c", "select"))


def top_functions(stats: pstats.Stats, count: int, key: int, only: str = "") -> list[list[Any]]:
    """(function, calls, own ms, cumulative ms) per session, by own (2) or cumulative (3)."""
    rows = []
    for (filename, line, name), (_cc, calls, own, cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{filename.split('site-packages/')[-1].split('/work/main/')[-1]}:{line}({name})"
        if only and only not in where:
            continue
        rows.append([where, calls / count, 1000 * own / count, 1000 * cumulative / count])
    rows.sort(key=lambda r: -r[key])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    options = parser.parse_args()
    admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", DEFAULT_ADMIN_URL)
    tmp = Path(tempfile.mkdtemp(prefix="surehand-bench-profile-"))
    redis_server = RedisServer(tmp)
    n = options.sessions
    try:
        url = fresh_database(admin, DATABASE).render_as_string(hide_password=False)
        backend = prepare_backend("postgres", url, "OPS", n + 20, redis_server.url(1))
        handle = backend.handle
        handle.registry.register(backend.role, noop_agent)
        handle.leases.ping()
        pending = iter(backend.pending)
        for _ in range(20):  # warm-up: connections, statement caches, imports
            handle.runner.run(next(pending).task_id)

        def session() -> None:
            outcome = handle.runner.run(next(pending).task_id)
            assert outcome.outcome == "settled", outcome

        session_costs, session_stats = profiled(session, n)
        handle.close()

        database = psycopg.connect(libpq(url), autocommit=True)
        database.execute(FLOOR_TABLE_DDL)
        client = redis.Redis.from_url(redis_server.url(1))
        take, drop = client.register_script(_LEASE_TAKE), client.register_script(_LEASE_DROP)

        def floor() -> None:
            key = uuid.uuid4().hex
            database.execute("INSERT INTO bench_floor (key, state) VALUES (%s, 'active')", (key,))
            take(keys=[f"lease:{key}"], args=[key, 30_000])
            drop(keys=[f"lease:{key}"], args=[key])
            database.execute(
                "UPDATE bench_floor SET state = 'review' WHERE key = %s AND state = 'active'",
                (key,),
            )

        for _ in range(20):
            floor()
        floor_costs, _floor_stats = profiled(floor, n)
        database.close()
        client.close()
    finally:
        redis_server.stop()

    costs = Table(title=f"Per operation, {n} sequential, in-process under cProfile")
    for column in ("", "wall ms", "CPU ms (this process)", "waiting on replies ms"):
        costs.add_column(column, justify="left" if not column else "right")
    for name, row in (("session/postgres", session_costs), ("floor", floor_costs)):
        costs.add_row(name, *(f"{row[k]:.2f}" for k in ("wall_ms", "cpu_ms", "waiting_ms")))
    costs.add_row(
        "session - floor",
        *(f"{session_costs[k] - floor_costs[k]:.2f}" for k in ("wall_ms", "cpu_ms", "waiting_ms")),
    )
    console.print(costs)
    own = top_functions(session_stats, n, 2)[: options.top]
    mine = top_functions(session_stats, n, 3, only="surehand/")[: options.top]
    for title, rows in (("own time", own), ("cumulative, surehand's functions", mine)):
        table = Table(title=f"Session profile by {title}, per session")
        for column in ("function", "calls", "own ms", "cumulative ms"):
            table.add_column(column, justify="left" if column == "function" else "right")
        for where, calls, own_ms, cumulative_ms in rows:
            table.add_row(where, f"{calls:.1f}", f"{own_ms:.3f}", f"{cumulative_ms:.3f}")
        console.print(table)
    stamp = utc_stamp()
    document = {
        "benchmark": "session-profile",
        "started_utc": stamp,
        "machine": machine(),
        "sessions": n,
        "per_operation": {"session/postgres": session_costs, "floor": floor_costs},
        "top_own": own,
        "top_cumulative_surehand": mine,
    }
    save("session-profile", document, stamp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
