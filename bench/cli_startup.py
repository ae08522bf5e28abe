"""Benchmark how long a ``surehand`` command takes from exec to exit (mostly imports).

    python bench/cli_startup.py [--rounds N]

Each round runs, interleaved so that a noisy machine affects every row alike:

- ``python -c pass``: the interpreter's own start, the floor of any Python CLI;
- ``python -c "import sqlalchemy"``: the least a command that reads the store must import;
- ``surehand --help``;
- ``surehand tasks --json`` on an empty, migrated SQLite store;
- ``surehand show TASK --json`` of one TASK;
- ``surehand submit ... --json`` (a create on SQLite).

Every command runs in a fresh process with ``SUREHAND_HOME`` pointing at a private directory.
The median and the maximum of the rounds are printed as a table beside the target (0.4 s for
read commands, from issue 12), with each command's time less the interpreter's start, and saved
to ``bench/results/cli-<UTC>.json``. This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"
SUREHAND = [sys.executable, "-m", "surehand"]
TARGET = 0.4
SUBMIT = ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "bench", "--json"]


def commands(task_id: str) -> dict[str, list[str]]:
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import sqlalchemy'": [sys.executable, "-c", "import sqlalchemy"],
        "surehand --help": [*SUREHAND, "--help"],
        "surehand tasks --json": [*SUREHAND, "tasks", "--json"],
        "surehand show TASK --json": [*SUREHAND, "show", task_id, "--json"],
        "surehand submit --json": [*SUREHAND, *SUBMIT],
    }


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def prepare(env: dict[str, str]) -> str:
    """Migrate the private store and create one TASK; returns its id."""
    subprocess.run([*SUREHAND, "db", "upgrade"], env=env, check=True, capture_output=True)
    done = subprocess.run([*SUREHAND, *SUBMIT], env=env, check=True, capture_output=True)
    return str(json.loads(done.stdout)["task_id"])


def measure(rounds: int, env: dict[str, str]) -> dict[str, list[float]]:
    argv_by_name = commands(prepare(env))
    times: dict[str, list[float]] = {name: [] for name in argv_by_name}
    for _ in range(rounds):
        for name, argv in argv_by_name.items():
            times[name].append(timed(argv, env))
    return times


def summarise(times: dict[str, list[float]]) -> list[dict[str, object]]:
    floor = statistics.median(times["python -c pass"])
    return [
        {
            "command": name,
            "median_s": round(statistics.median(values), 4),
            "max_s": round(max(values), 4),
            "median_less_interpreter_s": round(statistics.median(values) - floor, 4),
            "rounds_s": [round(v, 4) for v in values],
        }
        for name, values in times.items()
    ]


def show(rows: list[dict[str, object]]) -> None:
    table = Table(title=f"surehand CLI start-up (target for read commands: {TARGET} s)")
    for column in ("command", "median s", "max s", "less interpreter s"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for row in rows:
        table.add_row(
            str(row["command"]),
            f"{row['median_s']:.3f}",
            f"{row['max_s']:.3f}",
            f"{row['median_less_interpreter_s']:.3f}",
        )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SUREHAND_")}
        env["SUREHAND_HOME"] = home
        rows = summarise(measure(args.rounds, env))
    show(rows)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"cli-{stamp}.json"
    document = {
        "when": stamp,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average": os.getloadavg(),
        "rounds": args.rounds,
        "target_s": TARGET,
        "results": rows,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"saved bench/results/{path.name}")


if __name__ == "__main__":
    main()
