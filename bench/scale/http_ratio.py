"""``summary.http_create_vs_bare`` of ``bench/scale/run.py``: a run of ``bench/create/http_api.py``.

The HTTP create path has its own benchmark (two real servers, interleaved rounds); this runs
it at 8 clients as a child process and reads the ratio from the results file it saves, so that
the scale summary holds a figure measured in the same run instead of one copied from another.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common.results import RESULTS

REPO = Path(__file__).resolve().parents[2]
SAVED = re.compile(r"saved bench/results/(http-\w+\.json)")


def create_vs_bare(rounds: int, requests: int) -> dict[str, Any]:
    """Run ``http_api.py --clients 8``; the create / bare median, its rounds and the file."""
    argv = [sys.executable, str(REPO / "bench" / "create" / "http_api.py"), "--clients", "8"]
    argv += ["--rounds", str(rounds), "--requests", str(requests)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    found = SAVED.search(done.stdout)
    if done.returncode != 0 or found is None:
        return {"error": (done.stderr or done.stdout)[-2000:], "median": None}
    document = json.loads((RESULTS / found.group(1)).read_text())
    [row] = [row for row in document["summary"] if row["clients"] == 8]
    ratio = row["ratios"]["create / bare"]
    return {
        "median": ratio["median"],
        "by_round": ratio["by_round"],
        "create_p50_ms": row["variants"]["create"]["p50_ms"],
        "bare_p50_ms": row["variants"]["bare"]["p50_ms"],
        "file": found.group(1),
    }
