"""What ``sessions.py`` prints: its rich tables, the ratios against issue 13's targets."""

from __future__ import annotations

import statistics
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

# Issue 13's targets: session/postgres against the floor and against what users would deploy.
TARGETS = {
    "session/postgres / floor": 0.85,
    "session/postgres / celery+db": 5.0,
    "session/postgres / dbos": 3.0,
}
console = Console(width=None if sys.stdout.isatty() else 160)  # saved logs keep every column


def throughput_table(summaries: list[dict[str, Any]], ratios: dict[str, float]) -> Table:
    table = Table(title="Throughput: same broker, same workers (median of rounds)")
    for column in (
        "variant",
        "msgs/s",
        "vs plain",
        "vs plain+conf",
        "vs floor",
        "vs celery+db",
        "vs dbos",
        "Redis cmds/msg",
        "worker CPU ms/msg",
        "redis CPU ms/msg",
        "postgres CPU ms/msg",
        "machine busy %",
    ):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for s in summaries:
        table.add_row(
            s["name"],
            f"{s['per_second_median']:.0f}",
            _ratio(ratios.get(f"{s['name']} / plain")),
            _ratio(ratios.get(f"{s['name']} / plain+conf")),
            _ratio(ratios.get(f"{s['name']} / floor")),
            _ratio(ratios.get(f"{s['name']} / celery+db")),
            _ratio(ratios.get(f"{s['name']} / dbos")),
            f"{s['redis_commands_per_message']:.1f}",
            f"{s['worker_cpu_ms_per_message']:.2f}",
            f"{s['redis_cpu_ms_per_message']:.3f}",
            f"{s['postgres_cpu_ms_per_message']:.2f}",
            f"{s['machine_busy_percent']:.0f}",
        )
    return table


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def commands_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="Redis commands per message, idle-adjusted (mean of rounds)")
    table.add_column("command")
    names = [s["name"] for s in summaries]
    for name in names:
        table.add_column(name, justify="right")
    commands = sorted(
        {c for s in summaries for c in s["redis_commands"]},
        key=lambda c: -max(s["redis_commands"].get(c, 0) for s in summaries),
    )
    for command in commands:
        values = [s["redis_commands"].get(command, 0.0) for s in summaries]
        if max(values) >= 0.05:
            table.add_row(command, *(f"{v:.2f}" for v in values))
    return table


def phases_table(profiles: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="Where a no-op session's time goes (in-process, sequential)")
    table.add_column("phase")
    for name in profiles:
        table.add_column(f"{name} ms", justify="right")
    phases = sorted({p for prof in profiles.values() for p in prof["ms_per_session"]})
    for phase in phases:
        table.add_row(
            phase, *(f"{p['ms_per_session'].get(phase, 0.0):.2f}" for p in profiles.values())
        )
    kinds = sorted({k for p in profiles.values() for k in p["durable_commits_per_session"]})
    for kind in kinds:
        table.add_row(
            f"{kind} / session",
            *(f"{p['durable_commits_per_session'].get(kind, 0.0):.1f}" for p in profiles.values()),
        )
    table.add_row(
        "SQL statements / session",
        *(f"{sum(p['sql_statements_per_session'].values()):.1f}" for p in profiles.values()),
    )
    table.add_row(
        "Redis commands / session",
        *(f"{sum(p['redis_commands_per_session'].values()):.1f}" for p in profiles.values()),
    )
    return table


def heartbeat_table(result: dict[str, Any]) -> Table:
    table = Table(title="Heartbeat cost")
    for column in (
        "leases",
        "TTL / interval",
        "renewals/s",
        "expected/s",
        "client CPU %",
        "redis CPU %",
        "lost",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        str(result["leases"]),
        f"{result['ttl_seconds']:g}s / {result['interval_seconds']:g}s",
        f"{result['renewals_per_second']:.1f}",
        f"{result['expected_renewals_per_second']:.1f}",
        f"{result['client_cpu_percent']:.1f}",
        f"{result['redis_cpu_percent']:.1f}",
        str(result["lost"]),
    )
    return table


def rounds_table(by_round: dict[str, list[float]]) -> Table:
    table = Table(title="Ratios in every round (each within one round)")
    table.add_column("ratio")
    rounds = max((len(v) for v in by_round.values()), default=0)
    for number in range(rounds):
        table.add_column(f"round {number + 1}", justify="right")
    table.add_column("median", justify="right")
    table.add_column("target", justify="right")
    for key, values in by_round.items():
        target = TARGETS.get(key)
        table.add_row(
            key,
            *(f"{v:.2f}" for v in values),
            f"{statistics.median(values):.2f}",
            "" if target is None else f">= {target:g}",
        )
    return table


def print_verdicts(ratios: dict[str, float]) -> None:
    for key, target in TARGETS.items():
        if key in ratios:
            verdict = "meets" if ratios[key] >= target else "misses"
            console.print(f"{key}: {ratios[key]:.2f}x ({verdict} the {target:g}x target)")
