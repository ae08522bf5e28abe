"""A request body limit enforced before anything parses the body (pure ASGI middleware).

A body over the limit is answered 413 with a problem+json document and never reaches a route,
so nothing is parsed, validated or written. ``Content-Length`` is checked first; a chunked body
is read up to the limit and refused as soon as it passes it. Bodies under the limit are buffered
(at most the limit, 2 MiB by default) and replayed to the application.

After a 413 the rest of the body is read and dropped (up to :data:`DRAIN_BYTES`): closing a
connection with unread data in it makes the kernel reset it, and a client still sending would
then see "connection reset" instead of the 413.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DRAIN_BYTES = 16 * 1024 * 1024  # a larger body is cut off (and its client may see a reset)


class BodyLimit:
    """Refuse HTTP requests whose body exceeds ``max_bytes`` with 413."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, *, what: str = "a TASK body may be at most 1 MiB"
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.what = what  # the limit in the caller's words, for the refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, receive, more=True)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, receive, more=message.get("more_body", False))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send: Send, receive: Receive, *, more: bool) -> None:
        body = json.dumps(
            {
                "type": "urn:surehand:problem:payload_too_large",
                "title": "payload too large",
                "status": 413,
                "detail": f"the request body is larger than {self.max_bytes} bytes; nothing "
                f"was written ({self.what})",
                "code": "payload_too_large",
                "retryable": False,
                "field": "body",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                    # The unread rest of the body makes the connection unusable.
                    (b"connection", b"close"),
                ],
            }
        )
        # Drained before the response completes: servers stop delivering the body after that.
        await _drain(receive, more)
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive, more: bool) -> None:
    """Read and drop the rest of a refused body, up to DRAIN_BYTES."""
    drained = 0
    while more and drained < DRAIN_BYTES:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        drained += len(message.get("body", b""))
        more = message.get("more_body", False)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls wait for the client's disconnect, as usual

    return replay
