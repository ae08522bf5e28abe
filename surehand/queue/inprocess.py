"""kombu's in-process ``memory://`` transport, woken by a publish instead of a polling sleep.

kombu's virtual transports poll: ``Transport.drain_events`` tries every queue once and, when
all are empty or the channel's prefetch window is full (``Channel.drain_events`` raises
``Empty`` then), calls ``time.sleep(polling_interval)`` -- one second by default -- before it
looks again. Celery's consumer loop for a non-asynchronous transport (``synloop``) drains with
a two-second timeout, so under ``surehand up`` a TASK published to an idle worker waited up to
a second before its session started, and a worker whose window was full (every thread busy,
the next message reserved) noticed a freed thread only a second later: ``up`` sustained about
4.6 TASKs a second whatever the rate offered.

Here every put, ack and reject rings one process-wide :class:`Doorbell` (the memory
transport's queues are process-wide too: publisher and consumer use different connections),
and a consumer with nothing to take waits on the doorbell -- a ``threading.Condition`` --
instead of sleeping. It wakes as soon as something it may consume can have changed; the
polling interval stays as the longest wait, a safety net for a state change that rings no
bell. Queues, bindings and message handling are kombu's own (this subclasses them).

:func:`install` makes it the class behind the ``memory`` scheme in this process
(``celery_app.make_celery`` calls it for the in-process broker); the URL stays ``memory://``.
"""

from __future__ import annotations

import threading
import time
from queue import Empty
from typing import Any

import kombu.transport
from kombu.transport import memory

TRANSPORT = f"{__name__}:Transport"


class Doorbell:
    """A counter of state changes that waiters can block on (a generation count)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self.rings = 0

    def ring(self) -> None:
        """Something a consumer may take (a message, a free prefetch slot) may be there."""
        with self._cond:
            self.rings += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float | None) -> bool:
        """Block until a ring after ``seen`` (a value of ``rings``) or ``timeout`` seconds;
        True if it rang."""
        with self._cond:
            return self._cond.wait_for(lambda: self.rings != seen, timeout)


DOORBELL = Doorbell()


class Channel(memory.Channel):
    """The memory channel; every put, ack and reject rings :data:`DOORBELL`."""

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        super()._put(queue, message, **kwargs)
        DOORBELL.ring()

    def _put_fanout(
        self, exchange: str, message: Any, routing_key: str | None = None, **kwargs: Any
    ) -> None:
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        DOORBELL.ring()

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)
        DOORBELL.ring()  # a slot of the prefetch window is free again

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue)
        DOORBELL.ring()


class Transport(memory.Transport):
    """The memory transport whose consumers wait on :data:`DOORBELL`, not on a sleep."""

    Channel = Channel

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        """Deliver one message; raise ``TimeoutError`` (``socket.timeout``) if none came
        within ``timeout`` seconds (None: wait for one)."""
        cycle: Any = self.cycle
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = DOORBELL.rings  # read before looking: a put after the look still wakes us
            try:
                cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                pass
            wait: float | None = self.polling_interval or None  # None: until it rings
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError()
                wait = left if wait is None else min(wait, left)
            DOORBELL.wait(seen, wait)


def install() -> None:
    """Serve ``memory://`` kombu connections in this process with :class:`Transport`
    (idempotent). Connections opened before keep their transport."""
    kombu.transport.TRANSPORT_ALIASES["memory"] = TRANSPORT
    vars(kombu.transport).get("_transport_cache", {}).pop("memory", None)
