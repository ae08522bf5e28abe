"""What other test modules need from ``tests/doors/test_session_mcp.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, cast

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from surehand.agents.context import SessionContext, SessionPort
from surehand.dispatcher.sessions import Session
from surehand.facade import Surehand
from surehand.mcp.session_server import SessionMcp
from surehand.mcp.session_tools import Grant
from tests.session_helpers import Harness


def structured(result: Any) -> dict[str, Any]:
    data = result.structured_content
    assert isinstance(data, dict), result
    return data


async def _calls(grant: Grant, url: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    headers = {"Authorization": f"Bearer {grant.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        return [await client.call_tool(tool, args) for tool, args in calls]


def call(grant: Grant, tool: str, args: dict[str, Any], *, url: str | None = None) -> Any:
    """One tool call with ``grant``'s token (on its own URL unless ``url`` says otherwise)."""
    [result] = anyio.run(_calls, grant, url or grant.url, [(tool, args)])
    return result


@pytest.fixture
def harness_sh(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Surehand:
    monkeypatch.setattr("surehand.dispatcher.sessions.STORE_RETRY_DELAYS", ())
    return harness.surehand()


@pytest.fixture
def mcp(harness_sh: Surehand) -> Iterator[SessionMcp]:
    server = SessionMcp(harness_sh.services)
    yield server
    server.stop()


def context_of(session: Session, cancelled: threading.Event | None = None) -> SessionContext:
    """The context a worker would give ``session``'s agent."""
    return SessionContext(
        task=session.task,
        attempt=session.attempt,
        port=cast(SessionPort, None),
        cancelled=cancelled or threading.Event(),
    )


def granted(mcp: SessionMcp, session: Session) -> tuple[Grant, threading.Event]:
    cancelled = threading.Event()
    return mcp.grant(context_of(session, cancelled)), cancelled
