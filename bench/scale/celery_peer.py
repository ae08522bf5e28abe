"""The bare Celery peer of ``bench/scale/pg_latency.py``: Celery's defaults, one task that
stamps when its body starts running. Workers import it with ``PYTHONPATH`` the repository::

    BENCH_BROKER_URL=redis://... celery -A bench.scale.celery_peer worker --pool threads \
        -Q bench.stamp
"""

from __future__ import annotations

import os

from celery import Celery

from bench.scale.agents import record

STAMP = "bench.stamp"

app = Celery("peer", broker=os.environ.get("BENCH_BROKER_URL", "memory://"), set_as_current=False)
app.conf.task_ignore_result = True


@app.task(name=STAMP, ignore_result=True)
def stamp(key: str) -> None:
    """Stamp ``key`` as started (``celery``) and return."""
    record(key, "celery")
