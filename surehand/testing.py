"""Helpers for testing surehand and your own agents against it: a manual clock
(:class:`ManualClock`) and ready-made embedded instances (:func:`embedded`)."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from surehand.config import Settings
from surehand.facade import Surehand

DEFAULT_START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class ManualClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, moment: datetime) -> None:
        with self._lock:
            self._now = moment.astimezone(UTC)


@contextmanager
def embedded(
    directory: Path | str | None = None,
    *,
    clock: ManualClock | None = None,
    **settings: Any,
) -> Iterator[Surehand]:
    """A ``Surehand`` for a test of your agents: a fresh, migrated SQLite store in ``directory``
    (a temporary directory by default, removed afterwards), leases on in-process fakeredis, no
    broker, and ``clock`` if given. Register agents with ``@sh.agent``, create TASKs with
    ``sh.write_task`` and run their sessions in the test's thread with ``sh.run_session``::

        with embedded() as sh:
            sh.agent("DEV")(my_agent)
            task_id = sh.write_task(sender="PM", recipient="DEV", subject="Try it").task_id
            assert sh.run_session(task_id).outcome == "settled"

    ``settings`` are more ``Settings`` fields (``lease_ttl_seconds=...``)."""
    with contextlib.ExitStack() as stack:
        home = (
            Path(directory)
            if directory is not None
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="surehand-test-")))
        )
        values = {"home": home, "work_dir": home / "sessions", "broker_url": "", "redis_url": ""}
        sh = Surehand(settings=Settings.model_validate({**values, **settings}), clock=clock)
        stack.callback(sh.close)
        sh.store.upgrade()
        yield sh
