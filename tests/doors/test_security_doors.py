"""The network doors under misuse (issue 11): DNS rebinding, what /healthz and /metrics show, MCP
arguments, and an OpenAPI document that states what the API does.

In-process (ASGI test clients), on both databases where a store is involved.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from mcp import Client

from surehand.api import create_app
from surehand.config import Settings
from surehand.doors.auth import Authenticator
from surehand.doors.hosts import HostRule, split_host
from surehand.errors import ConfigError
from surehand.facade import Surehand
from surehand.mcp.tools import Tools, build_server
from surehand.mcp.transport import MCP_PATH, http_app
from surehand.metrics_port import serve_metrics
from surehand.store import Store, tasks

TOKENS = "tok-pm=alice:PM:acme,tok-dev=dan:DEV:acme,tok-admin=root:ADMIN:acme,tok-g=olga:PM:globex"
TASK = {"sender": "PM", "recipient": "DEV", "subject": "Fix login"}
PROBLEM_MEMBERS = {"type", "title", "status", "detail", "code", "retryable"}


pytestmark = pytest.mark.sh_settings(api_tokens=TOKENS)


def make_sh(store: Store, **settings: Any) -> Surehand:
    config = Settings(database_url=store.url).model_copy(update=settings)
    return Surehand(settings=config)


def client(app: FastAPI, token: str | None = "tok-pm", host: str = "127.0.0.1") -> TestClient:
    """A loopback caller (the token-less API answers only those)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(app, base_url=f"http://{host}", headers=headers, client=("127.0.0.1", 50000))


def count_tasks(store: Store) -> int:
    with store.snapshot() as connection:
        return tasks.count(connection)


# --- DNS rebinding: the Host allowlist ---------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example"])
def test_api_refuses_unknown_host_with_421(app: FastAPI, store: Store, host: str) -> None:
    with client(app) as http:
        created = http.post("/v1/tasks", json=TASK, headers={"Host": host})
        health = http.get("/healthz", headers={"Host": host})
    for response in (created, health):
        assert response.status_code == 421
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "host_not_allowed"
        assert set(response.json()) >= PROBLEM_MEMBERS
    assert count_tasks(store) == 0


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]", "[::1]:8000"]
)
def test_api_answers_loopback_names(app: FastAPI, host: str) -> None:
    with client(app) as http:
        assert http.get("/healthz", headers={"Host": host}).status_code == 200


def test_open_mode_refuses_rebound_host(store: Store) -> None:
    """The open local-ADMIN API is exactly what a rebinding page wants: it must refuse."""
    sh = make_sh(store)
    try:
        with client(create_app(sh), token=None) as http:
            response = http.post("/v1/tasks", json=TASK, headers={"Host": "attacker.test"})
            listing = http.get("/v1/tasks", headers={"Host": "attacker.test:80"})
        assert (response.status_code, listing.status_code) == (421, 421)
        assert count_tasks(store) == 0
    finally:
        sh.close()


def test_allowed_hosts_setting_adds_names(store: Store) -> None:
    sh = make_sh(store, api_tokens=TOKENS, api_allowed_hosts="api.internal, proxy.example:8443")
    try:
        with client(create_app(sh)) as http:
            assert http.get("/healthz", headers={"Host": "api.internal:9000"}).status_code == 200
            assert http.get("/healthz", headers={"Host": "proxy.example:8443"}).status_code == 200
            assert http.get("/healthz", headers={"Host": "proxy.example:80"}).status_code == 421
            assert http.get("/healthz", headers={"Host": "localhost"}).status_code == 200
    finally:
        sh.close()


def test_foreign_origin_is_403(app: FastAPI, store: Store) -> None:
    with client(app) as http:
        foreign = http.post("/v1/tasks", json=TASK, headers={"Origin": "http://evil.example"})
        same = http.post("/v1/tasks", json=TASK, headers={"Origin": "http://127.0.0.1:8000"})
    assert foreign.status_code == 403
    assert foreign.json()["code"] == "origin_not_allowed"
    assert same.status_code == 201
    assert count_tasks(store) == 1


def test_host_rule_parsing() -> None:
    rule = HostRule.of(["Example.COM", "[fd00::1]", "pinned.example:8443"])
    assert split_host("[::1]:8000") == ("[::1]", "8000")
    assert split_host("localhost") == ("localhost", None)
    allowed = ["example.com:1", "[fd00::1]", "pinned.example:8443", "127.0.0.1"]
    assert all(rule.allows(host) for host in allowed)
    refused = [None, "", "pinned.example", "localhost:x", "[::2]", "127.0.0.2"]
    assert not any(rule.allows(host) for host in refused)
    assert rule.allows_origin(None)
    assert not rule.allows_origin("null")
    for bad in ("http://x", "a b", "*", "host:port"):
        with pytest.raises(ConfigError, match="SUREHAND_API_ALLOWED_HOSTS"):
            HostRule.of([bad])


def test_mcp_http_uses_the_same_host_rule(sh: Surehand) -> None:
    rule = HostRule.from_settings(sh.settings)
    mcp = http_app(build_server(sh), Authenticator(sh.settings), rule)
    with TestClient(mcp, base_url="http://127.0.0.1") as http:
        rebound = http.post(MCP_PATH, json={}, headers={"Host": "evil.example"})
        bare = http.post(MCP_PATH, json={}, headers={"Host": "127.0.0.1"})  # no port: allowed
    assert rebound.status_code == 421
    assert rebound.json()["code"] == "host_not_allowed"
    assert bare.status_code == 401  # past the Host check, refused for want of a token
    assert bare.headers["content-type"] == "application/problem+json"
    assert bare.json()["code"] == "unauthorized"


# --- what is public: /healthz and /metrics ----------------------------------------------------


def test_healthz_shows_no_configuration(app: FastAPI, sh: Surehand) -> None:
    with client(app, token=None) as http:
        health = http.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    url = sh.store.engine.url
    for secret in filter(None, (url.username, url.host, url.database)):
        assert secret not in health.text


def test_health_details_are_for_admins(app: FastAPI, sh: Surehand) -> None:
    with client(app, token=None) as anonymous, client(app, "tok-pm") as pm:
        assert anonymous.get("/v1/admin/health").status_code == 401
        assert pm.get("/v1/admin/health").status_code == 403
    with client(app, "tok-admin") as admin:
        details = admin.get("/v1/admin/health").json()
    assert details["status"] == "ok"
    assert details["database"] == sh.store.describe()


def test_metrics_need_the_metrics_token_once_tokens_exist(store: Store) -> None:
    sh = make_sh(store, api_tokens=TOKENS, metrics_token="scrape-me")
    try:
        app = create_app(sh)
        with client(app, "tok-pm") as pm, client(app, "tok-g") as globex:
            pm.post("/v1/tasks", json=TASK)
            pm.post("/v1/tasks", json={**TASK, "subject": "two"})
            globex.post("/v1/tasks", json=TASK)
            assert pm.get("/metrics").status_code == 403
            assert globex.get("/metrics").status_code == 403
        with client(app, "tok-admin") as admin:  # an ADMIN is still one tenant's principal
            assert admin.get("/metrics").status_code == 403
        with client(app, None) as anonymous, client(app, "nope") as unknown:
            assert anonymous.get("/metrics").status_code == 401
            assert unknown.get("/metrics").status_code == 401
        with client(app, "scrape-me") as scraper:
            by_scraper = scraper.get("/metrics")
    finally:
        sh.close()
    assert by_scraper.status_code == 200
    assert 'surehand_tasks{bucket="inbox",tenant="acme"} 2.0' in by_scraper.text
    assert 'surehand_tasks{bucket="inbox",tenant="globex"} 1.0' in by_scraper.text


def test_metrics_open_on_loopback_without_tokens_unless_a_metrics_token(store: Store) -> None:
    for settings, expected in (({}, 200), ({"metrics_token": "m"}, 401)):
        sh = make_sh(store, **settings)
        try:
            with client(create_app(sh), None) as http:
                assert http.get("/metrics").status_code == expected
        finally:
            sh.close()


def test_worker_metrics_port_asks_for_the_token() -> None:
    server = serve_metrics("127.0.0.1", 0, token="scrape-me")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        assert httpx.get(url).status_code == 401
        ok = httpx.get(url, headers={"Authorization": "Bearer scrape-me"})
        assert ok.status_code == 200
        assert "surehand_submissions_total" in ok.text
    finally:
        server.shutdown()
        server.server_close()


# --- MCP arguments ----------------------------------------------------------------------------


def call_tools(sh: Surehand, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(build_server(sh)) as mcp:
            return [await mcp.call_tool(name, args) for name, args in calls]

    return anyio.run(run)


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    document = result.structured_content["error"]
    assert set(document) >= PROBLEM_MEMBERS, document
    return dict(document)


def test_mcp_refuses_unknown_arguments(store: Store) -> None:
    sh = make_sh(store, tenant="acme")
    try:
        smuggled, listed = call_tools(
            sh,
            ("write_task", {**TASK, "client_submission_id": "s-1", "tenant": "globex"}),
            ("list_tasks", {"tenant": "globex"}),
        )
        assert count_tasks(store) == 0
    finally:
        sh.close()
    for result in (smuggled, listed):
        problem = error_of(result)
        assert (problem["code"], problem["field"], problem["status"]) == (
            "invalid_request",
            "tenant",
            400,
        )


def test_mcp_type_and_service_errors_are_problems(store: Store) -> None:
    sh = make_sh(store)
    try:
        typed, ranged, service, missing = call_tools(
            sh,
            ("list_tasks", {"limit": "many"}),
            ("list_tasks", {"limit": 0}),
            ("write_task", {**TASK, "sender": "pm", "client_submission_id": "s-2"}),
            ("read_task", {"task_id": "TASK-20200101-001"}),
        )
    finally:
        sh.close()
    assert error_of(typed)["field"] == "limit"
    assert error_of(ranged)["field"] == "limit"
    assert error_of(service)["field"] == "sender"
    assert error_of(service)["type"] == "urn:surehand:problem:invalid_request"
    assert error_of(missing)["status"] == 404


def test_mcp_tool_schemas_forbid_extra_arguments(store: Store) -> None:
    sh = make_sh(store)

    async def listed() -> list[Any]:
        async with Client(build_server(sh)) as mcp:
            return list((await mcp.list_tools()).tools)

    try:
        schemas = {tool.name: tool.input_schema for tool in anyio.run(listed)}
    finally:
        sh.close()
    bodies = {name for name, _ in inspect.getmembers(Tools, inspect.isfunction)}
    assert set(schemas) == {
        "write_task",
        "write_report",
        "read_task",
        "list_tasks",
        "task_status",
        "cancel_task",
        "release_task",
        "pause_role",
        "resume_role",
    }
    assert set(schemas) == bodies - {"__init__", "principal", "call"}  # every tool body listed
    assert {name: schemas[name].get("additionalProperties") for name in schemas} == dict.fromkeys(
        schemas, False
    )


# --- the OpenAPI document and the statuses it states ------------------------------------------


def test_openapi_declares_problem_responses(app: FastAPI) -> None:
    with client(app) as http:
        spec = http.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "421" in responses, (method, path)
            for status, response in responses.items():
                if int(status) >= 400:
                    schema = response["content"]["application/problem+json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Problem"}, (path, status)
                    assert "application/json" not in response["content"]
            if path.startswith("/v1/") and "admin" not in path:
                assert {"400", "401", "503"} <= set(responses), (method, path)
    create = spec["paths"]["/v1/tasks"]["post"]["responses"]
    assert {"200", "201", "400", "401", "403", "409", "413", "421", "422"} <= set(create)
    assert "422" not in spec["paths"]["/v1/tasks/{task_id}/transitions"]["post"]["responses"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_openapi_states_role_and_id_patterns(app: FastAPI) -> None:
    with client(app) as http:
        spec = http.get("/openapi.json").json()
    request = spec["components"]["schemas"]["TaskRequest"]["properties"]
    assert request["sender"]["pattern"].startswith("^[A-Z]")
    assert request["sender"]["maxLength"] == 32
    csid = request["client_submission_id"]
    assert any("pattern" in v for v in csid.get("anyOf", [csid]))
    get_task = spec["paths"]["/v1/tasks/{task_id}"]["get"]["parameters"]
    assert get_task[0]["schema"]["pattern"]
    offset = spec["paths"]["/v1/tasks"]["get"]["parameters"]
    assert any(p["name"] == "offset" and "maximum" in p["schema"] for p in offset)


@pytest.mark.parametrize(
    "content", [b'{"sender": "PM", ', b'{"subject": "\xff\xfe"}', b"\xff", b"[1, 2"]
)
def test_malformed_json_is_always_malformed_json(
    app: FastAPI, store: Store, content: bytes
) -> None:
    with client(app) as http:
        response = http.post(
            "/v1/tasks", content=content, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_json"
    assert count_tasks(store) == 0


def test_huge_offset_is_400_not_500(app: FastAPI) -> None:
    with client(app) as http:
        response = http.get("/v1/tasks", params={"offset": "9223372036854775808"})
    assert response.status_code == 400
    assert response.json()["field"] == "offset"


def test_report_from_the_wrong_role_is_403(app: FastAPI) -> None:
    with client(app, "tok-pm") as pm, client(app, "tok-admin") as admin:
        task_id = pm.post("/v1/tasks", json=TASK).json()["task_id"]
        admin.post(f"/v1/tasks/{task_id}/transitions", json={"action": "claim", "actor": "DEV"})
        report = {"body": "done", "reporter": "QA"}
        refused = admin.post(f"/v1/tasks/{task_id}/reports", json=report)
    assert refused.status_code == 403
    assert refused.json()["code"] == "report_rejected"
    assert json.loads(refused.text)["reason"] == "reporter_mismatch"
