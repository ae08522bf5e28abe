"""Benchmark how long ``surehand --help``, ``surehand tasks`` and ``surehand effect`` take to
start, before and after a change, side by side in one run.

    python bench/surfaces/cli_startup.py [--before REF] [--rounds N]

``--before`` (default :data:`BEFORE`, the commit before issue 30's start-up work) is checked out
into a temporary git worktree; every command then runs twice per round, once importing surehand
from that checkout and once from this one (``PYTHONPATH``), with the same interpreter and
installed packages, interleaved so that a noisy machine affects both alike. Each variant has a
private, migrated, empty SQLite store (``SUREHAND_HOME``). Rows:

- ``python -c pass``, ``python -c 'import sqlalchemy'`` and ``python -c 'import typer,
  pydantic_settings, sqlalchemy'``: the interpreter's own start, the store's library, and the
  least ``surehand tasks`` must import (its command line, its settings, its store): the floors;
- ``surehand --help``;
- ``surehand tasks --json`` on the empty store;
- ``surehand effect --name bench -- true`` outside a session: it starts, parses its options
  and stops at the missing session (exit 1), so the row is its start-up alone, not the MCP
  round trip a real effect makes.

The medians (and maxima) are printed beside the target (0.3 s, issue 30) with the ratio
after/before, and saved to ``bench/results/cli-startup-<UTC>.json``. The machine's load average
is recorded: on a shared machine the absolute numbers move with it, the ratios much less. This
is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import git
from bench.common.results import save, utc_stamp

REPO = Path(__file__).resolve().parents[2]
BEFORE = "51e116e"  # main before issue 30 (`surehand tasks` 0.6-0.8 s there, per the issue)
TARGET = 0.3
FLOORS = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import sqlalchemy'": ["-c", "import sqlalchemy"],
    "python -c 'import typer, pydantic_settings, sqlalchemy'": [
        "-c",
        "import typer, pydantic_settings, sqlalchemy",
    ],
}
COMMANDS = {
    "surehand --help": ["--help"],
    "surehand tasks --json": ["tasks", "--json"],
    "surehand effect (start-up)": ["effect", "--name", "bench", "--", "true"],
}


@contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """``ref`` in a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory() as parent:
        where = Path(parent) / "before"
        git = ["git", "-C", str(REPO), "worktree"]
        subprocess.run([*git, "add", "--detach", str(where), ref], check=True, capture_output=True)
        try:
            yield where
        finally:
            subprocess.run([*git, "remove", "--force", str(where)], check=False)


def environment(source: Path, home: Path) -> dict[str, str]:
    """Imports surehand from ``source``; a private store under ``home``; no other SUREHAND_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUREHAND_", "PYTHON"))}
    return {**env, "PYTHONPATH": str(source), "SUREHAND_HOME": str(home)}


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(rounds: int, variants: dict[str, dict[str, str]], cwd: Path) -> dict[str, list[float]]:
    """Seconds per row and variant (``"<row>|<variant>"``), interleaved round by round."""
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, args in FLOORS.items():
            times.setdefault(f"{name}|floor", []).append(
                timed([sys.executable, *args], variants["after"], cwd)
            )
        for name, args in COMMANDS.items():
            for variant, env in variants.items():
                argv = [sys.executable, "-m", "surehand", *args]
                times.setdefault(f"{name}|{variant}", []).append(timed(argv, env, cwd))
    return times


def summarise(times: dict[str, list[float]]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in [*FLOORS, *COMMANDS]:
        row: dict[str, object] = {"command": name}
        medians = {}
        for variant in ("floor", "before", "after"):
            values = times.get(f"{name}|{variant}")
            if values:
                medians[variant] = statistics.median(values)
                row[f"{variant}_median_s"] = round(medians[variant], 4)
                row[f"{variant}_max_s"] = round(max(values), 4)
                row[f"{variant}_rounds_s"] = [round(v, 4) for v in values]
        if "after" in medians:
            row["after_over_before"] = round(medians["after"] / medians["before"], 3)
        rows.append(row)
    return rows


def show(rows: list[dict[str, object]], before: str) -> None:
    table = Table(title=f"surehand CLI start-up, median s (target {TARGET} s; before = {before})")
    for column in ("command", "before", "after", "after/before", "after max"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for row in rows:
        if "floor_median_s" in row:
            floor = f"{row['floor_median_s']:.3f}"
            table.add_row(str(row["command"]), floor, floor, "", f"{row['floor_max_s']:.3f}")
            continue
        table.add_row(
            str(row["command"]),
            f"{row['before_median_s']:.3f}",
            f"{row['after_median_s']:.3f}",
            f"{row['after_over_before']:.2f}",
            f"{row['after_max_s']:.3f}",
        )
    Console().print(table)


def prepare(variants: dict[str, dict[str, str]], cwd: Path) -> None:
    """Each variant's store, migrated (with that variant's migrations)."""
    for env in variants.values():
        argv = [sys.executable, "-m", "surehand", "db", "upgrade"]
        subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help=f"git ref to compare with [{BEFORE}]")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    load = os.getloadavg()
    with checkout(args.before) as old, tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        variants = {
            "before": environment(old, base / "before-home"),
            "after": environment(REPO, base / "after-home"),
        }
        prepare(variants, base)
        rows = summarise(measure(args.rounds, variants, base))
    show(rows, args.before)
    stamp = utc_stamp()
    document = {
        "when": stamp,
        "before": args.before,
        "after": _head(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_start": load,
        "load_average_end": os.getloadavg(),
        "rounds": args.rounds,
        "target_s": TARGET,
        "results": rows,
    }
    save("cli-startup", document, stamp)


def _head() -> str:
    return git("describe", "--always", "--dirty")


if __name__ == "__main__":
    main()
