"""The worker-side code of ``bench/sessions/delegation.py``; workers import it as
``bench.sessions.delegation_agents`` (``PYTHONPATH`` the repository).

* ``pm``: on its first attempt delegates ``BENCH_DELEGATION_CHILDREN`` DEV children and waits
  for them (``ctx.wait_for``: no worker slot held); on the attempt after they are all done it
  stamps ``resumed`` and returns their REPORTs.
* ``child``: returns at once.

Stamps are JSON lines ``{"task": id, "what": ..., "at": unix seconds}`` appended to the file
``BENCH_DELEGATION_STAMPS`` names (one ``write`` each).
"""

from __future__ import annotations

import os

from bench.common.stamps import append_stamp
from surehand.agents.context import SessionContext


def record(task: str, what: str) -> None:
    append_stamp(os.environ["BENCH_DELEGATION_STAMPS"], task, what)


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
