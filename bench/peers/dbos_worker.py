"""The DBOS peer of ``bench/sessions/sessions.py``: a worker process serving one DBOS queue.

    BENCH_DBOS_DATABASE_URL=postgresql://... BENCH_DBOS_EXECUTOR=dbos-0 \
        python bench/peers/dbos_worker.py --worker-concurrency 4 --polling 0.01

Each process launches DBOS on the system database ``BENCH_DBOS_DATABASE_URL`` (Postgres),
registers the queue ``bench_sessions`` with ``--worker-concurrency`` workflows at once on this
executor, and runs every workflow enqueued there: ``session(key)``, one workflow with one step
(``touch``, which does nothing). The workflow's input, its step's output and its end state are
what DBOS records durably; that is the durable-execution counterpart of a no-op session.
The bench enqueues with ``DBOSClient`` and counts workflows in state ``SUCCESS``.
Prints ``ready.`` once launched (as Celery workers do), then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from dbos import DBOS, DBOSConfig

APP = "surehand-bench"
QUEUE = "bench_sessions"
WORKFLOW = "session"


@DBOS.step()
def touch(key: str) -> str:
    """The one step: nothing but its durable checkpoint."""
    return key


@DBOS.workflow(name=WORKFLOW)
def session(key: str) -> str:
    return touch(key)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument("--polling", type=float, default=0.01, help="queue polling seconds")
    options = parser.parse_args()
    config: DBOSConfig = {
        "name": APP,
        "system_database_url": os.environ["BENCH_DBOS_DATABASE_URL"],
        "executor_id": os.environ.get("BENCH_DBOS_EXECUTOR", f"dbos-{os.getpid()}"),
        "application_version": "bench",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(
        QUEUE,
        worker_concurrency=options.worker_concurrency,
        polling_interval_sec=options.polling,
        on_conflict="always_update",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready.", flush=True)
    stop.wait()
    DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
