"""What a service-layer call needs: the store, the clock, settings and an optional publisher."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from surehand.clock import Clock, SystemClock
from surehand.config import Settings
from surehand.model import Task
from surehand.store import Store

Publisher = Callable[[Task], None]
"""Publishes a ``run_session`` message for a committed TASK; raises PublishFailed."""


@dataclass(frozen=True)
class Services:
    """Dependencies of the service layer, injected (tests pass a manual clock)."""

    store: Store
    settings: Settings = field(default_factory=Settings)
    clock: Clock = field(default_factory=SystemClock)
    publisher: Publisher | None = None
