"""What other test modules need from ``tests/doors/test_api.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import httpx
import pytest

from surehand.api import create_app
from surehand.config import Settings
from surehand.doors.serving import BackgroundServer
from surehand.facade import Surehand
from surehand.store import Store, receipts, tasks

TOKENS = ",".join(
    [
        "tok-pm=alice:PM:acme",
        "tok-dev=dan:DEV:acme",
        "tok-admin=root:ADMIN:acme",
        "tok-globex=olga:PM:globex",
    ]
)


REQUEST = {"sender": "PM", "recipient": "DEV", "subject": "Fix login", "body": "It fails."}


@dataclass
class Served:
    server: BackgroundServer
    sh: Surehand
    store: Store

    def client(self, token: str | None = "tok-pm") -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=30)

    def counts(self) -> tuple[int, int]:
        with self.store.snapshot() as connection:
            return tasks.count(connection), receipts.count(connection)


def serve(store: Store, **settings: object) -> Iterator[Served]:
    config = Settings(database_url=store.url).model_copy(update=settings)
    sh = Surehand(settings=config)
    server = BackgroundServer(create_app(sh), "127.0.0.1", 0).start()
    try:
        yield Served(server, sh, store)
    finally:
        server.stop()
        sh.close()


def post_task(
    client: httpx.Client, key: str | None, body: Mapping[str, object] | None = None
) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post("/v1/tasks", json=dict(body or REQUEST), headers=headers)


@pytest.fixture
def api(store: Store) -> Iterator[Served]:
    """The API served on each database, with TOKENS and a metrics token."""
    yield from serve(store, api_tokens=TOKENS, metrics_token="tok-metrics")
