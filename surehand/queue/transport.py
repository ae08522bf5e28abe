"""kombu's Redis transport with one redis-py client per channel for its synchronous commands.

kombu's Redis channel builds a new ``redis.Redis`` object for every publish, ack and event it
sends (``Channel.conn_or_acquire`` -> ``_create_client``). With redis-py 8 each construction
copies the client's table of reply callbacks: about 110 us here, several times per session
message (task-received, task-started and task-succeeded events, the ack). A redis-py client is
thread safe -- every command borrows a connection from the channel's pool and returns it -- so
one client per channel serves all of them. The asynchronous client that the worker's event
loop polls with BRPOP is kombu's own and is left alone. (kombu's Redis Cluster transport
already reuses one client the same way.)

:func:`install` makes it the class behind the ``redis`` and ``rediss`` schemes in this process
(``celery_app.make_celery`` calls it for a Redis broker). The scheme itself stays: logs,
``Connection.as_uri()`` and Flower's broker view (which picks its Redis client by the URL's
scheme) see ``redis://`` as before. The class changes nothing else of kombu's behaviour, so any
other kombu user in the process gets kombu's semantics, minus the per-command client.
"""

from __future__ import annotations

from typing import Any

import kombu.transport
from kombu.transport import redis as kombu_redis

TRANSPORT = f"{__name__}:Transport"


class Channel(kombu_redis.Channel):
    """A Redis channel whose synchronous commands share one client."""

    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        kombu_channel: Any = super()  # the stubs do not declare kombu's private methods
        if asynchronous:
            return kombu_channel._create_client(asynchronous=True)
        # Two threads racing here each build a client; both work, one is kept.
        client = self._sync_client
        if client is None:
            client = self._sync_client = kombu_channel._create_client()
        return client


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


def install() -> None:
    """Serve ``redis://`` and ``rediss://`` kombu connections in this process with
    :class:`Transport` (idempotent). Connections opened before keep their transport."""
    for scheme in ("redis", "rediss"):
        kombu.transport.TRANSPORT_ALIASES[scheme] = TRANSPORT
        # kombu caches each name's resolved class: drop ours so the next lookup resolves again.
        vars(kombu.transport).get("_transport_cache", {}).pop(scheme, None)
