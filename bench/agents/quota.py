"""Measure what the disk quota watch costs and how far a flood passes a quota before it stops.

    python bench/agents/quota.py [--rounds N] [--quota-mib M] [--every SECONDS ...]

Two measures (``surehand/agents/quotas.py`` is what a worker runs):

- **cost**: the time of one measurement of a session whose places hold 1,000, 10,000 and
  100,000 files (the walk the watch does each round), and the share of a core that costs at
  the default interval (the watch waits at least 20 times as long as a round takes);
- **overshoot**: a writer process floods a directory as fast as it can (1 MiB files of random
  bytes, through the page cache, like a hostile agent) under the watch with a ``--quota-mib``
  quota; when the watch marks it over, it is SIGKILLed at once, as a session's thread does.
  How much it had added then, past the quota, is the overshoot: printed for each interval
  (median and worst of ``--rounds``), for a flood alone and for one that first makes
  ``--decoys`` empty files (under the files quota) to make each round of the watch slow.

Saved to ``bench/results/quota-<UTC>.json``. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import machine
from bench.common.results import print_rows, save
from surehand.agents.quota_watch import COST_FACTOR, QuotaWatch
from surehand.agents.quotas import MIB, Quota, Watched, measure

WRITER = """
import os, sys
os.mkdir("decoys")
for number in range(int(sys.argv[2])):  # files first: they make each measurement longer
    open(f"decoys/{number}", "w").close()
block = os.urandom(1 << 20)
for number in range(int(sys.argv[1])):
    with open(f"flood-{number}.bin", "wb") as file:
        file.write(block)
"""


def walk_cost(directory: Path, files: int, repeats: int = 5) -> float:
    """Median seconds of one measurement of ``files`` files in 100 directories."""
    root = directory / f"tree-{files}"
    for number in range(files):
        folder = root / f"d{number % 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{number}").write_bytes(b"x")
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        measure([root])
        seconds.append(time.perf_counter() - started)
    shutil.rmtree(root)
    return statistics.median(seconds)


def overshoot(directory: Path, quota: Quota, every: float, most_mib: int, decoys: int) -> float:
    """MiB a flood had added past ``quota`` when the watch (every ``every`` s) stopped it;
    the flood first makes ``decoys`` empty files (slower rounds)."""
    root = directory / f"flood-{every}-{time.monotonic_ns()}"
    root.mkdir()
    watch = QuotaWatch(every)
    watched = Watched("bench", (root,), quota, threading.Event())
    watched.baseline = watched.usage()
    argv = [sys.executable, "-c", WRITER, str(most_mib), str(decoys)]
    writer = subprocess.Popen(argv, cwd=root)
    watch.watch(watched)
    try:
        while writer.poll() is None and not watched.wake.wait(0.01):
            pass
        writer.send_signal(signal.SIGKILL)  # what the session's thread does once woken
        writer.wait()
        added = (measure([root]).disk_bytes - watched.baseline.disk_bytes) / MIB
    finally:
        watch.forget(watched)
        shutil.rmtree(root)
    return added - quota.disk_bytes / MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quota-mib", type=int, default=64)
    parser.add_argument("--every", type=float, nargs="+", default=[1.0, 0.25])
    parser.add_argument("--flood-mib", type=int, default=4096)
    parser.add_argument("--decoys", type=int, nargs="+", default=[0, 90_000])
    args = parser.parse_args()
    quota = Quota(args.quota_mib * MIB, 100_000)
    with tempfile.TemporaryDirectory(prefix="bench-quota-", dir="/var/tmp") as directory:
        work = Path(directory)
        costs = {files: walk_cost(work, files) for files in (1_000, 10_000, 100_000)}
        floods = {
            (every, decoys): [
                overshoot(work, quota, every, args.flood_mib, decoys) for _ in range(args.rounds)
            ]
            for every in args.every
            for decoys in args.decoys
        }
    cost_rows = [
        {
            "files": files,
            "round_ms": round(seconds * 1000, 2),
            "core_share_at_1s": f"{min(seconds / max(1.0, COST_FACTOR * seconds), 1):.1%}",
        }
        for files, seconds in costs.items()
    ]
    flood_rows = [
        {
            "every_s": every,
            "files_first": decoys,
            "quota_mib": args.quota_mib,
            "overshoot_median_mib": round(statistics.median(values), 1),
            "overshoot_max_mib": round(max(values), 1),
        }
        for (every, decoys), values in floods.items()
    ]
    for title, rows in (("one measurement of a session", cost_rows), ("a flood", flood_rows)):
        print_rows(title, rows)
    document = {"rounds": args.rounds, "machine": machine(), "cost": cost_rows}
    save("quota", {**document, "floods": flood_rows})


if __name__ == "__main__":
    main()
