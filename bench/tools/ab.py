"""Two trees of surehand, the same benchmarks: does a change move the numbers?

    python bench/tools/ab.py OLD_TREE [--runs N] [--bench submit,http_api,sessions]

Runs each named benchmark (``--quick``) with ``PYTHONPATH`` on the old tree and on this tree,
alternately, ``--runs`` times each (old, new, old, new...), so both see the same machine load.
Throughput itself moves with the machine; what is compared are the ratios each benchmark run
measures side by side within its own rounds (write_task create over a bare INSERT, an HTTP
create over a bare FastAPI insert, a session over the floor), whose noise the runs show.
Prints a table (median of each side, every run, new / old) and saves
``bench/results/ab-<UTC>.json``. A check of a refactor, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.results import save

NEW = Path(__file__).resolve().parents[2]
ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ARGS = {
    "submit": ["--quick", "--no-dbos"],
    "http_api": ["--quick"],
    "sessions": ["--quick", "--no-peers"],
}
# Where each benchmark is in a tree (bench/GROUP/NAME.py); an older tree has it at bench/NAME.py.
GROUPS = {"submit": "create", "http_api": "create", "sessions": "sessions"}


def ratios_of(document: dict[str, Any]) -> dict[str, float]:
    """The side-by-side ratios a benchmark's JSON reports (median across its rounds)."""
    found: dict[str, float] = {}
    for row in document.get("throughput", []):
        for name, value in row.get("ratios", {}).items():
            found[f"{row.get('database', '')}/{row.get('clients', '')} {name}"] = value["median"]
    for row in document.get("summary", []):  # http_api: a row per client count
        for name, value in row.get("ratios", {}).items():
            found[f"{row.get('clients', '')} clients {name}"] = value["median"]
        for name, value in row.get("variants", {}).items():  # server CPU per request
            found[f"{row.get('clients', '')} clients {name} server ms"] = value[
                "server_cpu_ms_per_request"
            ]
    if isinstance(document.get("ratios"), dict):
        found.update({k: v for k, v in document["ratios"].items() if isinstance(v, float)})
    return found


def run_once(bench: str, tree: Path, tries: int = 3) -> dict[str, float]:
    """One run of ``bench`` on ``tree``; a run that fails (on a shared machine: Postgres out
    of connections, a server too slow to start) is run again, up to ``tries`` times."""
    for attempt in range(1, tries + 1):
        try:
            return _run(bench, tree)
        except subprocess.CalledProcessError:
            print(f"{bench} on {tree} failed (try {attempt} of {tries})", file=sys.stderr)
            if attempt == tries:
                raise
    raise AssertionError("unreachable")


def drop_bench_databases() -> None:
    """Drop the Postgres databases the benchmarks keep between runs (``surehand_bench*``): a
    tree migrates its bench database to its own head, which the other tree may not know (a
    newer migration), so every run starts from a database it creates and migrates itself."""
    from sqlalchemy import create_engine, text

    admin = os.environ.get("SUREHAND_BENCH_DATABASE_URL", ADMIN_URL)
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            names = connection.execute(
                text("SELECT datname FROM pg_database WHERE datname LIKE 'surehand_bench%'")
            ).scalars()
            for name in list(names):
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


def _run(bench: str, tree: Path) -> dict[str, float]:
    drop_bench_databases()
    results = tree / "bench" / "results"
    before = set(results.glob("*.json"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    script = tree / "bench" / GROUPS[bench] / f"{bench}.py"
    if not script.exists():
        script = tree / "bench" / f"{bench}.py"
    subprocess.run(
        [sys.executable, str(script), *ARGS[bench]],
        env=env,
        check=True,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    made = sorted(set(results.glob("*.json")) - before, key=os.path.getmtime)
    document = json.loads(made[-1].read_text(encoding="utf-8"))
    for path in made:
        path.unlink()  # only this comparison's own JSON is kept
    return ratios_of(document)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bench", default="submit,http_api")
    options = parser.parse_args()
    trees = {"old": options.old.resolve(), "new": NEW}
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    started = time.time()
    for bench in options.bench.split(","):
        results[bench] = {"old": {}, "new": {}}
        for _ in range(options.runs):
            for side, tree in trees.items():
                for name, value in run_once(bench, tree).items():
                    results[bench][side].setdefault(name, []).append(value)
    table = Table(title="old tree vs new tree: each run's own side-by-side ratio (median)")
    for column in ("bench", "ratio", "old", "new", "new / old", "old runs", "new runs"):
        table.add_column(column)
    rows = []
    for bench, sides in results.items():
        for name in sorted(sides["new"]):
            old, new = sides["old"].get(name, []), sides["new"][name]
            if not old:
                continue
            o, n = statistics.median(old), statistics.median(new)
            rows.append(
                {
                    "bench": bench,
                    "ratio": name,
                    "old": o,
                    "new": n,
                    "new_over_old": n / o,
                    "old_runs": old,
                    "new_runs": new,
                }
            )
            table.add_row(
                bench,
                name,
                f"{o:.3f}",
                f"{n:.3f}",
                f"{n / o:.2f}",
                " ".join(f"{v:.2f}" for v in old),
                " ".join(f"{v:.2f}" for v in new),
            )
    Console().print(table)
    document = {
        "benchmark": "ab",
        "old": str(trees["old"]),
        "runs": options.runs,
        "seconds": round(time.time() - started, 1),
        "load_average": os.getloadavg(),
        "rows": rows,
    }
    save("ab", document)


if __name__ == "__main__":
    main()
