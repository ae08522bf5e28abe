"""The worker-side code of ``bench/delegation.py``; workers import it with ``PYTHONPATH=bench``.

* ``pm``: on its first attempt delegates ``BENCH_DELEGATION_CHILDREN`` DEV children and waits
  for them (``ctx.wait_for``: no worker slot held); on the attempt after they are all done it
  stamps ``resumed`` and returns their REPORTs.
* ``child``: returns at once.

Stamps are JSON lines ``{"task": id, "what": ..., "at": unix seconds}`` appended to the file
``BENCH_DELEGATION_STAMPS`` names (one ``write`` each).
"""

from __future__ import annotations

import json
import os
import time

from surehand.agents.context import SessionContext


def record(task: str, what: str) -> None:
    path = os.environ["BENCH_DELEGATION_STAMPS"]
    line = json.dumps({"task": task, "what": what, "at": time.time()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def pm(ctx: SessionContext) -> str:
    children = ctx.children()
    wanted = int(os.environ.get("BENCH_DELEGATION_CHILDREN", "10"))
    if len(children) == wanted and all(c["bucket"] == "done" for c in children):
        record(ctx.task.task_id, "resumed")
        return f"{len(children)} children reported"
    for n in range(wanted):
        ctx.delegate("DEV", f"part {n} of {ctx.task.task_id}", key=f"part-{n}")
    record(ctx.task.task_id, "waiting")
    ctx.wait_for()
    return "waiting"


def child(ctx: SessionContext) -> str:
    return "done"
