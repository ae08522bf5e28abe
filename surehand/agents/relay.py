"""Bounded byte relays for the agents' gateway (:mod:`surehand.agents.gateway`), on asyncio.

What an agent opens through the gateway costs the worker descriptors (the agent's side and the
far side, and the session server's own), so nothing here waits on the agent without a bound:

- :class:`Budget` and :func:`accept`: how many connections one session (or one listener) holds
  at once; more wait in the kernel's backlog, unaccepted, until one ends;
- :func:`read_head`: a request's head must arrive whole within :data:`HEAD_SECONDS` and
  :data:`HEAD_BYTES` (a half-sent request is dropped, not kept);
- :func:`pipe`: both directions until both ends are done, closed after ``idle`` seconds
  without a byte either way (a stuck reader, an idle keep-alive).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger(__name__)

HEAD_SECONDS = 10.0
HEAD_BYTES = 64 * 1024
CONNECT_SECONDS = 10.0
CHUNK = 64 * 1024
HEAD_END = b"\r\n\r\n"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Budget:
    """At most ``limit`` connections at once for ``owner`` (a session, a listener).

    Past it, connections are not accepted until one ends: they wait in the listening socket's
    backlog, in the kernel, and cost this process no descriptor."""

    def __init__(self, limit: int, owner: str) -> None:
        self.limit = limit
        self.owner = owner
        self.writers: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.held = 0  # connections taken in now
        self.most = 0  # the most ever held at once
        self._free = asyncio.Semaphore(limit)
        self._said = False

    async def take(self) -> None:
        """Wait for a free place (the first wait is said in the log, once)."""
        if self._free.locked() and not self._said:
            self._said = True
            log.warning(
                "%s holds %d connections at once, its limit: more wait until one ends "
                "(SUREHAND_AGENT_CONNECTIONS)",
                self.owner,
                self.limit,
            )
        await self._free.acquire()

    def opened(self, writer: asyncio.StreamWriter) -> None:
        """The place taken is ``writer``'s connection's."""
        self.writers.add(writer)
        self.held += 1
        self.most = max(self.most, self.held)

    def give(self, writer: asyncio.StreamWriter | None = None) -> None:
        """A connection has ended (None: the place taken went unused)."""
        if writer is not None:
            self.writers.discard(writer)
            self.held -= 1
        self._free.release()

    def close_all(self) -> None:
        """Cut every connection still held (the session has ended)."""
        for task in list(self.tasks):
            task.cancel()
        for writer in list(self.writers):
            abort(writer)


async def accept(listeners: Mapping[socket.socket, Handler], budget: Budget) -> None:
    """Serve the connections of ``listeners`` (non-blocking), each with its handler, never
    more than ``budget`` at once all together, until cancelled. A failing handler ends its
    own connection only."""
    while True:
        await budget.take()
        listener = await _readable(list(listeners))
        try:
            conn, _ = listener.accept()
        except OSError:
            budget.give()  # gone before it was taken in
            continue
        try:
            reader, writer = await _streams(conn)
        except OSError:
            conn.close()
            budget.give()
            continue
        budget.opened(writer)
        task = asyncio.create_task(_served(budget, listeners[listener], reader, writer))
        budget.tasks.add(task)
        task.add_done_callback(budget.tasks.discard)


async def _streams(conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams on an accepted connection; a head longer than :data:`HEAD_BYTES` overruns."""
    conn.setblocking(False)
    if conn.family == socket.AF_UNIX:
        return await asyncio.open_unix_connection(sock=conn, limit=HEAD_BYTES)
    return await asyncio.open_connection(sock=conn, limit=HEAD_BYTES)


async def _readable(listeners: list[socket.socket]) -> socket.socket:
    """The first of ``listeners`` with a connection waiting."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[socket.socket] = loop.create_future()

    def wake(listener: socket.socket) -> None:
        if not ready.done():
            ready.set_result(listener)

    for listener in listeners:
        loop.add_reader(listener.fileno(), wake, listener)
    try:
        return await ready
    finally:
        for listener in listeners:
            loop.remove_reader(listener.fileno())


async def _served(
    budget: Budget, handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        await handler(reader, writer)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
        pass  # the agent's side went away or misbehaved: its connection ends here
    except Exception:
        log.exception("the agents' gateway failed on a connection of %s", budget.owner)
    finally:
        budget.give(writer)
        abort(writer)  # a no-op once it was finished


async def read_head(reader: asyncio.StreamReader) -> bytes:
    """An HTTP head (through its blank line) within :data:`HEAD_SECONDS`; TimeoutError,
    IncompleteReadError (ended early) or LimitOverrunError (over :data:`HEAD_BYTES`)."""
    return await asyncio.wait_for(reader.readuntil(HEAD_END), HEAD_SECONDS)


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Head = Callable[[asyncio.StreamReader], Awaitable[bytes]]


async def pipe(one: Stream, other: Stream, idle: float, *, head: Head | None = None) -> None:
    """Copy both ways until both sides have ended, or nothing moved for ``idle`` seconds;
    then close both. ``head``: what to send ``one`` first, read from ``other`` (an answer's
    head, rewritten) while ``one``'s bytes already flow to ``other``."""
    moved = [asyncio.get_running_loop().time()]
    copies = [
        asyncio.create_task(_copy(one[0], other[1], moved)),
        asyncio.create_task(_copy(other[0], one[1], moved, head)),
    ]
    watch = asyncio.create_task(_watch(moved, idle))
    clean = False
    try:
        clean = await _both_ended(copies, watch)
    finally:
        for task in (*copies, watch):
            task.cancel()
        if not clean:  # idle, a side broke (a head too long or cut), or the session ended
            abort(one[1])
            abort(other[1])
    one[1].close()  # now, not in a task that a session's end could cancel before it runs
    other[1].close()
    await asyncio.gather(_closed(one[1]), _closed(other[1]))  # what is buffered goes out


async def _both_ended(copies: list[asyncio.Task[None]], watch: asyncio.Task[None]) -> bool:
    """True once both copies have ended well; False when one broke or ``watch`` ended."""
    pending: set[asyncio.Task[None]] = {*copies, watch}
    while True:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if watch in done or any(task.exception() is not None for task in done):
            return False
        if all(task.done() for task in copies):
            return True


async def _copy(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    moved: list[float],
    head: Head | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        if head is not None:
            writer.write(await head(reader))
            moved[0] = loop.time()
        while data := await reader.read(CHUNK):
            moved[0] = loop.time()
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # the other direction may still be talking


async def _watch(moved: list[float], idle: float) -> None:
    loop = asyncio.get_running_loop()
    while (left := moved[0] + idle - loop.time()) > 0:
        await asyncio.sleep(left)


async def finish(writer: asyncio.StreamWriter) -> None:
    """Close once what is buffered has gone out, within :data:`HEAD_SECONDS` (else cut)."""
    writer.close()
    await _closed(writer)


async def _closed(writer: asyncio.StreamWriter) -> None:
    try:
        await asyncio.wait_for(writer.wait_closed(), HEAD_SECONDS)
    except (OSError, TimeoutError):
        abort(writer)


def abort(writer: asyncio.StreamWriter) -> None:
    """Close at once, dropping what is unsent (nothing waits on an agent that stopped reading)."""
    with contextlib.suppress(Exception):
        writer.transport.abort()


async def refuse(writer: asyncio.StreamWriter, status: str, message: str) -> None:
    """Answer an HTTP error with ``message`` as its text, and close."""
    body = f"surehand: {message}\n".encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await finish(writer)
