"""Wrong tokens are throttled without locking out the innocent (issue 30, items 1, 2 and 4):
failures count per client and per presented token, a valid token always gets in, a success
resets nothing, 429 carries Retry-After, forwarded headers count only from listed proxies
(none by default), and the token-less doors answer loopback clients that came straight to them.

In process (ASGI test clients with a chosen client address), except where the proxy headers
matter: those run uvicorn as ``surehand api`` configures it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from surehand.api import create_app
from surehand.config import Settings
from surehand.doors.auth import Authenticator
from surehand.doors.hosts import HostRule
from surehand.doors.serving import BackgroundServer
from surehand.facade import Surehand
from surehand.mcp.tools import build_server
from surehand.mcp.transport import MCP_PATH, http_app
from surehand.metrics_port import serve_metrics
from surehand.store import Store

RIGHT = "pm-token-0123456789"
TOKENS = f"{RIGHT}=alice:PM:acme,qa-token-0123456789=quinn:QA:globex"
METRICS = "metrics-token-0123456789"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


pytestmark = pytest.mark.sh_settings(api_tokens=TOKENS, metrics_token=METRICS)


def handle(store: Store, **settings: Any) -> Surehand:
    return Surehand(settings=Settings(database_url=store.url).model_copy(update=settings))


def client(app: FastAPI, address: str = "192.0.2.9", token: str | None = None) -> TestClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(
        app,
        base_url="http://127.0.0.1",
        client=(address, 50000),
        headers=headers,
        follow_redirects=False,
    )


def tasks_as(http: TestClient, token: str) -> Any:
    return http.get("/v1/tasks", headers={"Authorization": f"Bearer {token}"})


def test_twenty_garbage_tokens_then_the_right_one_from_the_same_client_gets_in(
    app: FastAPI,
) -> None:
    """Before: after 10 failures every request from the address was 429, the right token's
    included -- and every local agent, CLI and script shares 127.0.0.1."""
    with client(app) as http:
        garbage = [tasks_as(http, f"garbage-{n:04d}") for n in range(20)]
        right = tasks_as(http, RIGHT)
    assert right.status_code == 200
    assert {answer.status_code for answer in garbage} == {401, 429}
    assert garbage[-1].status_code == 429
    assert int(garbage[-1].headers["retry-after"]) > 0
    assert garbage[-1].json()["code"] == "too_many_attempts"


def test_a_success_does_not_reset_the_count(app: FastAPI) -> None:
    """Before: four bad guesses and one good token, repeated 100 times, never got a 429."""
    bad: list[int] = []
    with client(app) as http:
        for round_ in range(5):
            bad += [tasks_as(http, f"guess-{round_}-{n}").status_code for n in range(4)]
            assert tasks_as(http, RIGHT).status_code == 200
    assert 429 in bad
    assert bad[: bad.index(429)] == [401] * bad.index(429)


def test_one_wrong_token_from_many_addresses_is_throttled_as_a_token(app: FastAPI) -> None:
    """Rotating addresses does not keep a replayed token counting from zero."""
    answers = []
    for n in range(15):
        with client(app, f"198.51.100.{n}") as http:
            answers.append(tasks_as(http, "stale-token-of-an-old-agent").status_code)
    assert answers[-1] == 429
    with client(app, "198.51.100.200") as http:
        assert tasks_as(http, RIGHT).status_code == 200


def test_forwarded_headers_are_believed_from_no_proxy_by_default(sh: Surehand) -> None:
    """Before: X-Forwarded-For was believed from 127.0.0.1, so any local process chose the
    address it was counted as: a new address per guess never reached a lockout."""
    assert Settings().api_forwarded_allow_ips == ""
    server = BackgroundServer(
        create_app(sh), "127.0.0.1", 0, forwarded_allow_ips=sh.settings.api_forwarded_allow_ips
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            answers = [
                http.get(
                    "/v1/tasks",
                    headers={
                        "Authorization": f"Bearer guess-{n:04d}",
                        "X-Forwarded-For": f"203.0.113.{n}",
                    },
                )
                for n in range(15)
            ]
            right = http.get("/v1/tasks", headers={"Authorization": f"Bearer {RIGHT}"})
    finally:
        server.stop()
    assert [a.status_code for a in answers[-3:]] == [429] * 3  # all counted as 127.0.0.1
    assert right.status_code == 200


def sign_in(browser: TestClient, token: str) -> Any:
    form = browser.get("/ui/sign-in")
    found = CSRF.search(form.text)
    assert found is not None, form.text[:500]
    return browser.post("/ui/sign-in", data={"token": token, "csrf_token": found.group(1)})


def test_console_sign_in_lets_the_right_token_in_after_garbage(app: FastAPI) -> None:
    with client(app) as browser:
        garbage = [sign_in(browser, f"garbage-{n:04d}").status_code for n in range(20)]
        right = sign_in(browser, RIGHT)
    assert garbage[-1] == 429
    assert right.status_code == 303


def test_mcp_over_http_lets_the_right_token_in_after_garbage(sh: Surehand) -> None:
    mcp = http_app(build_server(sh), Authenticator(sh.settings), HostRule.of(()))
    with TestClient(mcp, base_url="http://127.0.0.1", client=("192.0.2.40", 1)) as http:
        garbage = [
            http.post(MCP_PATH, json={}, headers={"Authorization": f"Bearer g-{n}"})
            for n in range(20)
        ]
        right = http.post(MCP_PATH, json={}, headers={"Authorization": f"Bearer {RIGHT}"})
    assert garbage[-1].status_code == 429
    assert int(garbage[-1].headers["retry-after"]) > 0
    assert right.status_code not in (401, 403, 429)


# --- the metrics token ---------------------------------------------------------------------


def test_metrics_token_guesses_are_throttled(app: FastAPI) -> None:
    """Before: every wrong metrics token got 401, however many."""
    with client(app) as http:
        guesses = [
            http.get("/metrics", headers={"Authorization": f"Bearer m-{n}"}) for n in range(15)
        ]
        right = http.get("/metrics", headers={"Authorization": f"Bearer {METRICS}"})
        tenant_token = http.get("/metrics", headers={"Authorization": f"Bearer {RIGHT}"})
    assert guesses[-1].status_code == 429
    assert int(guesses[-1].headers["retry-after"]) > 0
    assert right.status_code == 200
    assert tenant_token.status_code == 403  # a valid token, the wrong kind: not a guess


def test_worker_metrics_port_throttles_guesses() -> None:
    server = serve_metrics("127.0.0.1", 0, token=METRICS)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        guesses = [httpx.get(url, headers={"Authorization": f"Bearer m-{n}"}) for n in range(15)]
        right = httpx.get(url, headers={"Authorization": f"Bearer {METRICS}"})
    finally:
        server.shutdown()
        server.server_close()
    assert guesses[-1].status_code == 429
    assert int(guesses[-1].headers["retry-after"]) > 0
    assert right.status_code == 200


# --- the token-less doors: loopback clients that came straight here --------------------------


@pytest.fixture
def open_app(store: Store) -> Iterator[FastAPI]:
    with handle(store, tenant="acme") as surehand:
        yield create_app(surehand)


def test_the_token_less_api_refuses_a_non_loopback_client(open_app: FastAPI) -> None:
    """Before: every caller was the local ADMIN, whatever its address."""
    with client(open_app, "192.0.2.77") as remote:
        listed = remote.get("/v1/tasks")
        created = remote.post(
            "/v1/tasks", json={"sender": "PM", "recipient": "DEV", "subject": "x"}
        )
        scraped = remote.get("/metrics")
    for answer in (listed, created, scraped):
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "forbidden"
    with client(open_app, "127.0.0.1") as local:
        assert local.get("/v1/tasks").status_code == 200


def test_the_token_less_api_refuses_what_a_proxy_relayed(open_app: FastAPI) -> None:
    """A same-host reverse proxy connects from 127.0.0.1: what it relays is not local."""
    with client(open_app, "127.0.0.1") as local:
        relayed = local.get("/v1/tasks", headers={"X-Forwarded-For": "203.0.113.5"})
        forwarded = local.get("/v1/tasks", headers={"Forwarded": "for=203.0.113.5"})
    assert (relayed.status_code, forwarded.status_code) == (403, 403)


def test_the_token_less_mcp_over_http_refuses_a_non_loopback_client(store: Store) -> None:
    with handle(store) as surehand:
        mcp = http_app(build_server(surehand), Authenticator(surehand.settings), HostRule.of(()))
        with TestClient(mcp, base_url="http://127.0.0.1", client=("192.0.2.41", 1)) as http:
            refused = http.post(MCP_PATH, json={})
    assert refused.status_code == 403


def test_token_less_metrics_show_no_tenant_names(store: Store) -> None:
    """Before: every tenant's name and volume, to any local caller."""
    for tenant in ("acme", "globex"):
        with handle(store, tenant=tenant) as surehand:
            surehand.write_task(sender="PM", recipient="DEV", subject="count me")
    with (
        handle(store, tenant="acme") as surehand,
        client(create_app(surehand), "127.0.0.1") as http,
    ):
        scraped = http.get("/metrics")
    assert scraped.status_code == 200
    assert 'surehand_tasks{bucket="inbox",tenant="_all"} 2.0' in scraped.text
    assert "acme" not in scraped.text
    assert "globex" not in scraped.text


def test_the_metrics_token_still_shows_tenants(app: FastAPI, sh: Surehand) -> None:
    sh.write_task(sender="PM", recipient="DEV", subject="count me")
    with client(app, "127.0.0.1") as http:
        scraped = http.get("/metrics", headers={"Authorization": f"Bearer {METRICS}"})
    assert 'surehand_tasks{bucket="inbox",tenant="default"} 1.0' in scraped.text
