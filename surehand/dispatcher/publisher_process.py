"""The outbox publisher in a process of its own (``SUREHAND_API_PUBLISHER=process``).

``surehand api`` publishes created TASKs from a background thread by default
(:class:`~surehand.dispatcher.outbox_publisher.OutboxPublisher`); that thread's publish (Celery's
``send_task``, about 1 ms of CPU a TASK) then shares the API process's interpreter lock with the
requests it answers. With ``process``, the API starts this module as a child: the child runs the
same publisher thread on its own runtime, and the API wakes it after each creating commit by
writing one byte to a pipe (a write that would block means a wake is pending already).

Nothing here is needed for correctness: a TASK's message waits in the outbox whatever happens to
the child. When the child is gone, the API starts another (at most once a second) and, until it
runs, drains the outbox itself after its commit, as a process without a publisher does; the
dispatcher sweep remains the safety net. When the API goes, the child reads end-of-file on the
pipe (only the API holds its write end) and exits after the drain in progress.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time

from surehand import children
from surehand.config import Settings

log = logging.getLogger(__name__)

RESPAWN_SECONDS = 1.0
CHILD = "surehand.publisher_child"  # the child's side (it imports the runtime, above us)


class PublisherProcess:
    """A child process draining the outbox, woken through a pipe (the API's side)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._child: subprocess.Popen[bytes] | None = None
        self._write: int | None = None
        self._spawned_at = float("-inf")
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the child (once); it drains the outbox at once."""
        with self._lock:
            if self._child is None and not self._stopped:
                self._spawn()

    def wake(self) -> bool:
        """Ask the child for a drain; False when none runs (the caller drains itself)."""
        with self._lock:
            if self._stopped or not self._running():
                return False
            assert self._write is not None
            try:
                os.write(self._write, b"\x01")
            except BlockingIOError:
                pass  # the pipe is full: the child has wakes to read already
            except BrokenPipeError:
                return False  # it died just now: the next wake starts another
            return True

    def stop(self, timeout: float = 10.0) -> None:
        """Close the pipe (the child stops after its drain in progress) and wait for it."""
        with self._lock:
            self._stopped = True
            child, self._child = self._child, None
            self._close_pipe()
        if child is None:
            return
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def _running(self) -> bool:
        if self._child is not None and self._child.poll() is None:
            return True
        if time.monotonic() - self._spawned_at < RESPAWN_SECONDS:
            return False  # a child that keeps dying must not cost every create a fork
        if self._child is not None:
            log.warning(
                "the outbox publisher process ended (%s); starting another", self._child.returncode
            )
        try:
            self._spawn()
        except OSError:  # no process to be had now: this create publishes its TASK itself
            log.exception("could not start the outbox publisher process; retrying later")
            return False
        return True

    def _spawn(self) -> None:
        self._close_pipe()
        self._child, self._spawned_at = None, time.monotonic()
        read, write = os.pipe2(os.O_CLOEXEC)  # only this process may hold the write end
        os.set_blocking(write, False)
        try:
            # Isolated, with only what it needs: not the API's working directory on its
            # import path, nor the API's tokens in its environment (surehand/children.py).
            self._child = subprocess.Popen(
                children.python_module(CHILD, str(read)),
                pass_fds=(read,),
                env=children.environment(extra=_store_and_broker(self.settings)),
            )
        except OSError:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._write = write

    def _close_pipe(self) -> None:
        if self._write is not None:
            os.close(self._write)
            self._write = None


def _store_and_broker(settings: Settings) -> dict[str, str]:
    """The child's settings come from the environment; the API's may come from its flags."""
    return {
        "SUREHAND_DATABASE_URL": settings.resolved_database_url(),
        "SUREHAND_BROKER_URL": settings.broker_url,
        "SUREHAND_REDIS_URL": settings.redis_url,
        "SUREHAND_API_PUBLISHER": "thread",
    }
