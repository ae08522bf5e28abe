"""The worker-side code of ``bench/sessions.py``: a plain Celery app with a no-op task, and the
no-op surehand agent. Workers import it with ``PYTHONPATH=bench``::

    celery -A celery_noop worker --pool threads --concurrency 4 -Q bench.plain
    SUREHAND_AGENTS=DEV=celery_noop:noop_agent surehand worker --roles DEV --concurrency 4

``BENCH_BROKER_URL`` names the broker. ``BENCH_PLAIN_CONFIG=surehand`` gives the plain app
surehand's Celery settings (events on, prefetch 1, priority steps, its Redis transport)
instead of Celery's defaults, which separates the cost of those settings from the cost of a
session.
``BENCH_DONE_FILE`` names a file that each finished plain task appends one byte to: that is how
the bench counts completions without adding a Redis command per task.
"""

from __future__ import annotations

import os

from celery import Celery

from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.queue.celery_app import make_celery

PLAIN_TASK = "bench.noop"


def _app() -> Celery:
    broker = os.environ.get("BENCH_BROKER_URL", "memory://")
    if os.environ.get("BENCH_PLAIN_CONFIG") == "surehand":
        return make_celery(Settings.model_validate({"broker_url": broker}))
    app = Celery("plain", broker=broker, set_as_current=False)
    app.conf.task_ignore_result = True
    return app


app = _app()
_done_fd: int | None = None


def _mark_done() -> None:
    global _done_fd
    path = os.environ.get("BENCH_DONE_FILE")
    if not path:
        return
    if _done_fd is None:
        _done_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_done_fd, b".")


@app.task(name=PLAIN_TASK, ignore_result=True)
def noop() -> None:
    """The plain Celery task: does nothing but count itself."""
    _mark_done()


def noop_agent(ctx: SessionContext) -> str:
    """The no-op surehand agent: no operation, returns at once (its return becomes the REPORT)."""
    return "ok"
