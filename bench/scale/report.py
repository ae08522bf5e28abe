"""The tables and summary fields of ``bench/scale/run.py``'s held-session runs (``held``)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

COLUMNS = (
    ("sessions", "sessions"),
    ("agent", "agent"),
    ("pool", "pool"),
    ("sandbox", "sandbox"),
    ("running_at_once", "running"),
    ("leases_lost", "lost"),
    ("rss_mib_per_session", "worker RSS MiB/s."),
    ("children_rss_mib_per_session", "children RSS MiB/s."),
    ("total_pss_mib_held_per_session", "all PSS held MiB/s."),
    ("threads_per_session", "threads/s."),
    ("redis_commands_per_second", "Redis cmd/s"),
    ("postgres_connections", "PG conns"),
    ("reconciler_pass_ms", "reconcile ms"),
)


def held_table(rows: list[dict[str, Any]], title: str) -> Table:
    """One row per held run; a failed run shows its error's last line."""
    out = Table(title=title)
    for _, label in COLUMNS:
        out.add_column(label, justify="right")
    out.add_column("renewal lateness p50 / p99 / max ms", justify="right")
    for row in rows:
        if "error" in row:
            last = row["error"].strip().splitlines()[-1][:80]
            out.add_row(str(row["sessions"]), row["agent"], row["pool"], row["sandbox"], last)
            continue
        jitter = row["heartbeat_jitter"]
        lateness = " / ".join(
            str(jitter[k]) for k in ("lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms")
        )
        out.add_row(*(str(row[key]) for key, _ in COLUMNS), lateness)
    return out


def jitter_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Renewal lateness of every held run that measured it."""
    return [
        {
            "sessions": row["sessions"],
            "agent": row["agent"],
            "pool": row["pool"],
            **{
                key: row["heartbeat_jitter"][key]
                for key in (
                    "heartbeat_seconds",
                    "intervals",
                    "interval_p50_s",
                    "lateness_p50_ms",
                    "lateness_p99_ms",
                    "lateness_max_ms",
                    "over_1s",
                    "sample_error_ms_max",
                )
            },
        }
        for row in rows
        if "heartbeat_jitter" in row
    ]


def command_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The command agent's cost: the worker process, and its trampolines and programs."""
    return [
        {
            "sessions": row["sessions"],
            "sandbox": row["sandbox"],
            **pick(row, "running_at_once", "leases_lost", "error"),
            **pick(
                row,
                "rss_mib_per_session",
                "threads_per_session",
                "children_held",
                "children_rss_mib_per_session",
                "children_pss_mib_per_session",
                "postgres_connections",
                "reconciler_pass_ms",
                "seconds_to_all_running",
            ),
        }
        for row in rows
    ]


def pool_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pool's cost per session held, with the whole worker (all its processes) counted."""
    return [
        {
            "pool": row["pool"],
            "sessions": row["sessions"],
            **pick(row, "running_at_once", "leases_lost", "error"),
            **pick(
                row,
                "processes_held",
                "total_pss_mib_held",
                "total_pss_mib_held_per_session",
                "total_pss_mib_per_session",
                "rss_mib_per_session",
                "children_rss_mib_held",
                "all_threads_held",
                "postgres_connections",
            ),
        }
        for row in rows
    ]


def max_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The most sessions one threads worker held with every lease kept, and each run."""
    kept = [
        row
        for row in rows
        if "error" not in row
        and row["leases_lost"] == 0
        and row["running_at_once"] == row["sessions"]
    ]
    return {
        "held_all_with_no_lease_lost": max((row["sessions"] for row in kept), default=None),
        "runs": [
            {
                "sessions": row["sessions"],
                **pick(row, "running_at_once", "leases_lost", "error"),
                **pick(
                    row,
                    "seconds_to_all_running",
                    "rss_mib_per_session",
                    "threads_held",
                    "postgres_connections",
                    "reconciler_pass_ms",
                ),
                "renewal_lateness_p99_ms": row.get("heartbeat_jitter", {}).get("lateness_p99_ms"),
            }
            for row in rows
        ],
    }


def pick(row: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The ``keys`` that ``row`` has."""
    return {key: row[key] for key in keys if key in row}
