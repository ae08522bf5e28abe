"""What ``submit.py`` prints: each ratio by round against its target, and the report tables."""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.create.submit_backends import (
    CLIENTS,
    CONVERGE_CALLERS,
    CREATE_TARGET,
    RATIOS,
    REUSE_TARGET,
    Backend,
    Rates,
)


def summarize(backends: list[Backend], rates: Rates, ratios: Rates) -> list[dict[str, Any]]:
    rows = []
    for backend in backends:
        for clients in CLIENTS:
            key = (backend.name, clients)
            rate = {v: statistics.median(rates[(*key, v)]) for v in backend.variants}
            create_ratio = statistics.median(ratios[(*key, "create / bare")])
            reuse_ratio = statistics.median(ratios[(*key, "reuse / bare")])
            reuse_create = [
                r / c for r, c in zip(rates[(*key, "reuse")], rates[(*key, "create")], strict=True)
            ]
            rows.append(
                {
                    "database": backend.name,
                    "clients": clients,
                    "bare_ops_s": round(rate["bare"], 1),
                    "create_ops_s": round(rate["create"], 1),
                    "reuse_ops_s": round(rate["reuse"], 1),
                    "create_over_bare": round(create_ratio, 3),
                    "reuse_over_bare": round(reuse_ratio, 3),
                    "reuse_over_create": round(statistics.median(reuse_create), 3),
                    "create_target_met": create_ratio >= CREATE_TARGET,
                    "reuse_target_met": reuse_ratio >= REUSE_TARGET,
                    "create_over_bare_by_round": [
                        round(r, 3) for r in ratios[(*key, "create / bare")]
                    ],
                    "reuse_over_bare_by_round": [
                        round(r, 3) for r in ratios[(*key, "reuse / bare")]
                    ],
                    "ops_s": {v: round(r, 1) for v, r in rate.items()},
                    "ops_s_by_round": {
                        v: [round(r, 1) for r in rates[(*key, v)]] for v in backend.variants
                    },
                    "ratios": {
                        name: {
                            "median": round(statistics.median(ratios[(*key, name)]), 3),
                            "by_round": [round(r, 3) for r in ratios[(*key, name)]],
                            "target": target,
                        }
                        for top, bottom, target in RATIOS
                        if (*key, name := f"{top} / {bottom}") in ratios
                    },
                }
            )
    return rows


def print_ratio_tables(console: Console, document: dict[str, Any]) -> None:
    every = Table(title="Every ratio, every round (each taken within one round)")
    for column in ("database", "clients", "ratio", "by round", "median", "target"):
        every.add_column(column, justify="left" if column in ("ratio", "by round") else "right")
    for row in document["throughput"]:
        for name, ratio in row["ratios"].items():
            target = ratio["target"]
            every.add_row(
                row["database"],
                str(row["clients"]),
                name,
                " ".join(f"{r:.2f}" for r in ratio["by_round"]),
                f"{ratio['median']:.2f}",
                ""
                if target is None
                else f">= {target:g}" + (" met" if ratio["median"] >= target else " MISSED"),
            )
    console.print(every)
    rates = Table(title="ops/s, median of rounds")
    for column in ("database", "clients", "variant", "ops/s", "by round"):
        rates.add_column(column, justify="left" if column in ("variant", "by round") else "right")
    for row in document["throughput"]:
        for variant, rate in row["ops_s"].items():
            rates.add_row(
                row["database"],
                str(row["clients"]),
                variant,
                f"{rate:.0f}",
                " ".join(f"{r:.0f}" for r in row["ops_s_by_round"][variant]),
            )
    console.print(rates)


def print_report(console: Console, title: str, document: dict[str, Any]) -> None:
    table = Table(title=title)
    columns = ("database", "clients", "bare ops/s", "create ops/s", "reuse ops/s")
    ratio_columns = ("create/bare", "reuse/bare", "reuse/create")
    targets = (f"create>={CREATE_TARGET}x", f"reuse>={REUSE_TARGET}x")
    for column in (*columns, *ratio_columns, *targets):
        table.add_column(column, justify="right")
    for row in document["throughput"]:
        table.add_row(
            row["database"],
            str(row["clients"]),
            *(f"{row[k]:.0f}" for k in ("bare_ops_s", "create_ops_s", "reuse_ops_s")),
            *(
                f"{row[k]:.2f}"
                for k in ("create_over_bare", "reuse_over_bare", "reuse_over_create")
            ),
            *("yes" if row[k] else "NO" for k in ("create_target_met", "reuse_target_met")),
        )
    console.print(table)

    print_ratio_tables(console, document)

    converge = Table(title=f"{CONVERGE_CALLERS} callers, one id, released by a barrier")
    for column in ("database", "rounds", "p50 ms", "p99 ms", "max ms", "slowest p50 ms", "bad"):
        converge.add_column(column, justify="right")
    for name, stats in document["convergence_64"].items():
        converge.add_row(
            name,
            str(stats["rounds"]),
            *(f"{stats[k]:.1f}" for k in ("p50_ms", "p99_ms", "max_ms", "slowest_caller_p50_ms")),
            str(stats["rounds_not_1_created_63_reused"]),
        )
    console.print(converge)

    profiled = Table(title="per operation (single client, on every engine of the store)")
    for column in (
        *("database", "variant", "statements", "commits", "async-engine stmts", "rollbacks"),
        "checkouts",
    ):
        profiled.add_column(column, justify="right")
    for name, report in document["profile_per_op"].items():
        for variant, seen in report.items():
            profiled.add_row(
                name,
                variant,
                *(
                    f"{seen.get(k, 0):.2f}"
                    for k in ("statements", "commits", "async-engine stmts", "rollbacks")
                ),
                f"{seen.get('checkouts', 0):.2f}",
            )
    console.print(profiled)
    for name, costs in document["unit_costs"].items():
        console.print(
            f"{name}: empty transaction {costs['empty_transaction_ms']:.2f} ms, "
            f"+ one trivial statement {costs['one_trivial_statement_ms']:.2f} ms, "
            f"TASK document render (YAML) {costs['render_task_document_ms']:.2f} ms"
        )
