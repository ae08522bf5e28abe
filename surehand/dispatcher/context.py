"""What a service-layer call needs: the store, the clock, settings, and optional publishers of
session messages and hold notices (the after-commit effects)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from surehand.clock import Clock, SystemClock
from surehand.config import Settings
from surehand.model import Task
from surehand.store import Store

Publisher = Callable[[Task], None]
"""Publishes a ``run_session`` message for a committed TASK; raises PublishFailed."""

BatchPublisher = Callable[[Sequence[Task]], None]
"""Publishes ``run_session`` messages for committed TASKs together (one round trip to the
broker where it can); raises PublishFailed when the broker took none or only some of them."""

PublisherWake = Callable[[], bool]
"""Wakes a background outbox publisher after a creating commit; False when none runs here
(then the caller drains the outbox itself)."""

HoldNotifier = Callable[[Iterable[Mapping[str, Any]]], None]
"""Tells operators that TASKs are held for review (``task_id``, ``case_id``, ``attempt``)."""


@dataclass(frozen=True)
class Services:
    """Dependencies of the service layer, injected (tests pass a manual clock)."""

    store: Store
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    publisher: Publisher | None = None
    notify_hold: HoldNotifier | None = None
    wake_publisher: PublisherWake | None = None
    # Set with ``publisher`` when both send the same messages (the runtime's Celery app); a
    # drain of the outbox then publishes its batch at once instead of one TASK at a time.
    publish_batch: BatchPublisher | None = None
