"""What the session server remembers about one session: its budget, and its hooks' calls.

An agent is hostile code, and its session tools write to the shared store: issue 29 measured
105 one-MiB progress revisions and 105 intents in 20 seconds from one session, about 20 GB of
store growth an hour. So each session has a budget (:class:`SessionBudget`, from
:class:`SessionLimits`): at most so many operations, REPORT revisions and bytes in all, and so
many calls in any minute. A call past a limit is refused before it writes anything, with
``session_limit`` naming the limit and its setting; the session otherwise keeps working (its
other calls, its final message as its REPORT). A journaled tool call the budget refuses is
denied, never let through unjournaled.

:class:`HookCalls` is the hooks' state, kept here and not in any file of the session: which
operation each of Claude Code's tool calls (by its ``tool_use_id``) was journaled as, and which
operations the hooks (not the agent) began.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from surehand.config import Settings
from surehand.errors import SessionLimitReached, SessionRateLimited

MIB = 1024 * 1024
WINDOW_SECONDS = 60.0
Kind = Literal["operation", "report", "delegate", "call"]


@dataclass(frozen=True)
class SessionLimits:
    """A session's limits (``SUREHAND_SESSION_TOOLS_*``)."""

    max_operations: int = 500
    max_reports: int = 100
    max_bytes: int = 32 * MIB
    calls_per_minute: int = 300
    max_children: int = 50

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionLimits:
        return cls(
            max_operations=settings.session_tools_max_operations,
            max_reports=settings.session_tools_max_reports,
            max_bytes=settings.session_tools_max_mib * MIB,
            calls_per_minute=settings.session_tools_calls_per_minute,
            max_children=settings.session_tools_max_children,
        )


@dataclass
class SessionBudget:
    """What one session has used of its :class:`SessionLimits` (thread-safe)."""

    limits: SessionLimits = field(default_factory=SessionLimits)
    clock: Callable[[], float] = time.monotonic
    operations: int = 0
    reports: int = 0
    children: int = 0
    bytes: int = 0
    calls: deque[float] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def spend(self, kind: Kind, size: int) -> None:
        """Count one call of ``kind`` carrying ``size`` bytes; SessionLimitReached (counting
        nothing) when it would pass a limit."""
        with self._lock:
            now = self.clock()
            while self.calls and now - self.calls[0] >= WINDOW_SECONDS:
                self.calls.popleft()
            self._check(kind, size, now)
            self.calls.append(now)
            self.operations += kind == "operation"
            self.reports += kind == "report"
            self.children += kind == "delegate"
            self.bytes += size

    def _check(self, kind: Kind, size: int, now: float) -> None:
        limits = self.limits
        if len(self.calls) >= limits.calls_per_minute:
            wait = max(1, round(WINDOW_SECONDS - (now - self.calls[0])))
            raise SessionRateLimited(
                f"this session made {limits.calls_per_minute} calls to its session tools in "
                f"the last minute (SUREHAND_SESSION_TOOLS_CALLS_PER_MINUTE); wait {wait} s "
                "and call again",
                limit="calls_per_minute",
                retry_after=wait,
            )
        if kind == "operation" and self.operations >= limits.max_operations:
            raise _volume("max_operations", f"{limits.max_operations} operations", "journaled")
        if kind == "report" and self.reports >= limits.max_reports:
            raise _volume("max_reports", f"{limits.max_reports} REPORT revisions", "recorded")
        if kind == "delegate" and self.children >= limits.max_children:
            raise _volume("max_children", f"{limits.max_children} child TASKs", "delegated")
        if self.bytes + size > limits.max_bytes:
            mib = limits.max_bytes / MIB
            raise _volume("max_mib", f"{mib:g} MiB of arguments", "stored")


def _volume(limit: str, what: str, done: str) -> SessionLimitReached:
    setting = f"SUREHAND_SESSION_TOOLS_{limit.upper()}"
    return SessionLimitReached(
        f"this session has used its {what} ({setting}); nothing more of that kind is {done} "
        "for it: finish the work you can and end with your final message, which is still your "
        "REPORT",
        limit=limit,
    )


@dataclass(frozen=True)
class Journaled:
    """A tool call the hooks journaled: its operation, and the call it was (its identity)."""

    operation_id: int
    identity: str


@dataclass
class HookCalls:
    """The hooks' journal of one session, by Claude Code's call id (thread-safe)."""

    pending: dict[str, Journaled] = field(default_factory=dict)
    made: set[int] = field(default_factory=set)  # the operations the hooks began
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begun(self, call_id: str, journaled: Journaled) -> None:
        with self._lock:
            self.pending[call_id] = journaled
            self.made.add(journaled.operation_id)

    def ended(self, call_id: str) -> Journaled | None:
        """What ``call_id`` was journaled as, once (None: it was not)."""
        with self._lock:
            return self.pending.pop(call_id, None)

    def pending_as(self, call_id: str) -> Journaled | None:
        with self._lock:
            return self.pending.get(call_id)

    def declared(self, open_ids: list[int]) -> list[int]:
        """Of a session's open intents, those the agent declared itself (not the hooks)."""
        with self._lock:
            return [operation_id for operation_id in open_ids if operation_id not in self.made]
