"""Watching a command agent's running program until it ends.

The session sleeps until something happens -- the program's end, the session's cancellation,
the quota watch -- and stops the program's group when the session is cancelled, its time is up
or it goes over its disk quota (:mod:`surehand.agents.exits` says what wakes it).
"""

from __future__ import annotations

import time
from pathlib import Path

from surehand.agents import quotas
from surehand.agents.context import SessionContext
from surehand.agents.groups import AgentGroup
from surehand.agents.outputs import OUTPUTS_DIR
from surehand.agents.workspaces import Workspace
from surehand.errors import AgentError

_POLL = 0.1
# The longest a waiting session sleeps even when its program's end and its cancellation both
# wake it: a safety net should a wake-up ever be missed, not a poll (1,000 sessions: 17/s).
_SAFETY_NAP = 60.0
# From SIGTERM to SIGKILL for a program whose session was stopped on purpose (a cancel, a time
# limit): a moment to clean up, short enough that a cancel ends the whole tree within seconds.
STOPPED_GRACE_SECONDS = 2.0


def watched_session(
    ctx: SessionContext,
    dirs: tuple[Path, Path],
    workspace: Workspace | None,
    quota: quotas.Quota,
) -> quotas.Watched:
    """The session under its quota, its baseline measured now (before it starts); ``dirs``:
    the root of the session directories and this session's own."""
    root, work_dir = dirs
    places = [work_dir, root / OUTPUTS_DIR / ctx.attempt.attempt_id]
    places += [path for path, _ in workspace.binds] if workspace is not None else []
    return quotas.watched_session(ctx.attempt.attempt_id, places, within=root, quota=quota)


def wait_for_exit(
    group: AgentGroup, ctx: SessionContext, watched: quotas.Watched, timeout: float
) -> int:
    """The program's exit code, once it ends; stops it when the session is cancelled, the
    ``timeout`` passes or it goes over its quota. Sleeps until one of them happens: the
    program's end, the session's cancellation and the quota watch all set ``wake`` (see
    :mod:`surehand.agents.exits`); only where one of them cannot does it look every
    ``_POLL`` seconds."""
    deadline = time.monotonic() + timeout
    wake = watched.wake
    with group.waking(wake) as on_end, ctx.waking(wake) as on_cancel:
        nap = _SAFETY_NAP if on_end and on_cancel else _POLL
        while True:
            wake.clear()  # before looking: whatever happens from here on sets it again
            if (code := group.poll()) is not None:
                break
            _stop_if_over(group, ctx, (deadline, timeout), watched)
            left = deadline - time.monotonic()
            wake.wait(min(nap, left))
    if group.interrupted:
        ctx.interrupt()  # an interruption, not the agent's failure: the attempt is not failed
        raise AgentError("the worker shut down; the command was stopped")
    return code


def _stop_if_over(
    group: AgentGroup,
    ctx: SessionContext,
    limit: tuple[float, float],
    watched: quotas.Watched,
) -> None:
    """Stop the program if its session was cancelled or its time is up (AgentError), or
    it went over its disk quota (killed at once: SessionInterrupted); ``limit``: the
    monotonic deadline and the timeout it came from."""
    deadline, timeout = limit
    if watched.exceeded is not None:
        group.kill()  # at once: no grace to write more in
        watched.raise_if_over()
    if ctx.cancelled:
        group.stop(STOPPED_GRACE_SECONDS if ctx.stop_reason else None)
        why = ctx.stopped[1] if ctx.stopped else ctx.stop_reason or "the session lost its lease"
        raise AgentError(f"{why}; the command was stopped")
    if time.monotonic() > deadline:
        group.stop()
        raise AgentError(f"command timed out after {timeout:g}s and was stopped")
