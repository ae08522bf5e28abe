"""``surehand tasks --watch``: a live table of TASKs, refreshed until Ctrl-C or a condition.

For scripts (and tests) ``--task TASK-… --until-bucket review`` ends the watch with exit 0 as
soon as that TASK reaches the bucket (several buckets: ``review,done``), or with
``EXIT_TIMEOUT`` after ``--timeout`` seconds. With ``--json`` it prints one JSON line each time
the listing changes, and the watched TASK's record when the condition is met.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group
from rich.live import Live
from rich.text import Text

from surehand.cli.common import EXIT_OK, EXIT_TIMEOUT, console, rich_console
from surehand.cli.render import tasks_table
from surehand.facade import Surehand
from surehand.model import Bucket, Task


@dataclass(frozen=True)
class WatchSpec:
    """What to show and when to stop."""

    bucket: str | None = None
    recipient: str | None = None
    limit: int = 50
    interval: float = 1.0
    until: frozenset[Bucket] = frozenset()
    task_id: str | None = None
    timeout: float | None = None


def parse_buckets(text: str | None) -> frozenset[Bucket]:
    """``review,done`` → {REVIEW, DONE}; ValueError names an unknown bucket."""
    if not text:
        return frozenset()
    try:
        return frozenset(Bucket(part.strip()) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"{exc}; buckets are {', '.join(b.value for b in Bucket)}") from None


def _done(sh: Surehand, spec: WatchSpec) -> Task | None:
    if spec.task_id is None or not spec.until:
        return None
    task = sh.get_task(spec.task_id)
    return task if task.bucket in spec.until else None


def _emit(data: object) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def _view(found: Sequence[Task], spec: WatchSpec) -> Group:
    waiting = ""
    if spec.task_id and spec.until:
        names = ",".join(sorted(b.value for b in spec.until))
        waiting = f" waiting for {spec.task_id} to reach {names};"
    footer = Text(f"refreshing every {spec.interval:g} s;{waiting} Ctrl-C to stop", style="dim")
    return Group(tasks_table(found), footer)


def watch(sh: Surehand, spec: WatchSpec, *, as_json: bool = False) -> int:
    """Refresh until Ctrl-C (exit 0), the condition (exit 0) or the timeout (EXIT_TIMEOUT)."""
    deadline = time.monotonic() + spec.timeout if spec.timeout else None
    last: list[dict[str, object]] | None = None
    live = None if as_json else Live(console=rich_console(console), refresh_per_second=4)
    try:
        if live is not None:
            live.start()
        while True:
            found = sh.list_tasks(bucket=spec.bucket, recipient=spec.recipient, limit=spec.limit)
            if live is not None:
                live.update(_view(found, spec))
            else:
                records = [task.to_dict() for task in found]
                if records != last:
                    _emit({"tasks": records})
                    last = records
            reached = _done(sh, spec)
            if reached is not None:
                if as_json:
                    _emit({"reached": reached.bucket.value, "task": reached.to_dict()})
                return EXIT_OK
            if deadline is not None and time.monotonic() >= deadline:
                return EXIT_TIMEOUT
            time.sleep(spec.interval)
    except KeyboardInterrupt:
        return EXIT_OK  # watching until Ctrl-C is the normal way to end
    finally:
        if live is not None:
            live.stop()
