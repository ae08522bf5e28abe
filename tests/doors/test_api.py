"""The HTTP API over real HTTP: uvicorn on a loopback port, httpx clients, both databases.

The seed's scenarios: a lost response is answered 200 reused by the retry, 8 concurrent
callers get one 201 and seven 200, a different body under the same key is 422, tenants are
isolated, auth failures are 401/403, and malformed or oversized bodies write nothing.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from surehand.api.problems import conflict_response
from surehand.config import Settings
from surehand.digest import request_digest
from surehand.doors.auth import Authenticator
from surehand.errors import ConfigError
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    Bucket,
    ConflictCode,
    ConflictInfo,
    Disposition,
    ReceiptState,
    WriteTaskResult,
    task_path,
)
from surehand.requests import parse_task_request
from surehand.store import Store
from tests.shared.api import REQUEST, TOKENS, Served, post_task, serve


def test_created_then_reused_same_record(api: Served) -> None:
    with api.client() as client:
        first = post_task(client, "sub-1")
        again = post_task(client, "sub-1")
    assert first.status_code == 201
    assert first.headers["location"] == f"/v1/tasks/{first.json()['task_id']}"
    assert again.status_code == 200
    assert first.json()["disposition"] == "created"
    assert again.json() == {**first.json(), "disposition": "reused", "action_taken": False}
    assert api.counts() == (1, 1)


def test_lost_response_retry_is_reused(api: Served) -> None:
    """The first response never reaches the client; its retry gets the same TASK with 200."""
    body = json.dumps(REQUEST).encode()
    head = (
        "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok-pm\r\n"
        f"Idempotency-Key: lost-1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", api.server.port)) as raw:
        raw.sendall(head + body)
        deadline = time.monotonic() + 10
        while api.counts() != (1, 1) and time.monotonic() < deadline:
            time.sleep(0.02)
        # Closed without reading a byte: the response is lost.
    with api.client() as client:
        retry = post_task(client, "lost-1")
    assert retry.status_code == 200
    assert retry.json()["disposition"] == "reused"
    assert api.counts() == (1, 1)


def test_eight_concurrent_callers_one_created(api: Served) -> None:
    barrier = threading.Barrier(8)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def call() -> None:
        with api.client() as client:
            barrier.wait()
            response = post_task(client, "race-1")
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(r.status_code for r in responses) == [200] * 7 + [201]
    assert len({r.json()["task_id"] for r in responses}) == 1
    assert api.counts() == (1, 1)


def test_same_key_different_body_is_422_and_writes_nothing(api: Served) -> None:
    with api.client() as client:
        first = post_task(client, "sub-2")
        conflict = post_task(client, "sub-2", {**REQUEST, "subject": "Something else"})
    assert conflict.status_code == 422
    assert conflict.headers["content-type"] == "application/problem+json"
    problem = conflict.json()
    assert problem["code"] == "digest_mismatch"
    assert problem["result"]["disposition"] == "conflict"
    assert problem["result"]["task_id"] == first.json()["task_id"]
    assert api.counts() == (1, 1)


def test_submission_id_from_header_or_body(api: Served) -> None:
    with api.client() as client:
        both = post_task(client, "a-1", {**REQUEST, "client_submission_id": "b-1"})
        same = post_task(client, "c-1", {**REQUEST, "client_submission_id": "c-1"})
        body_only = post_task(client, None, {**REQUEST, "client_submission_id": "d-1"})
        malformed = post_task(client, "no spaces allowed")
        legacy = post_task(client, None)
    assert both.status_code == 400
    assert both.json()["field"] == "Idempotency-Key"
    assert same.status_code == 201
    assert body_only.status_code == 201
    assert body_only.json()["client_submission_id"] == "d-1"
    assert malformed.status_code == 400
    assert malformed.json()["field"] == "Idempotency-Key"
    assert legacy.status_code == 201
    assert legacy.json()["idempotent"] is False  # no id: no retry guarantee
    assert api.counts() == (3, 2)


def test_in_progress_is_409_with_retry_after() -> None:
    # write_task no longer answers in_progress (a receipt is committed with its TASK; a
    # concurrent caller waits on the database and gets reused), but the code stays for the
    # clients that handle it, and its problem stays a retryable 409.
    result = WriteTaskResult(
        disposition=Disposition.CONFLICT,
        action_taken=False,
        task_id="TASK-20200101-901",
        task_path=task_path(Bucket.INBOX, "TASK-20200101-901", "PM", "DEV"),
        client_submission_id="busy-1",
        request_digest=request_digest(parse_task_request(REQUEST).to_fields()),
        digest_schema_version=DIGEST_SCHEMA_VERSION,
        receipt_state=ReceiptState.COMMITTED,
        idempotent=True,
        conflict=ConflictInfo(ConflictCode.IN_PROGRESS, "another call holds busy-1"),
    )

    response = conflict_response(result)

    assert response.status_code == 409
    body = json.loads(bytes(response.body))
    assert body["code"] == "in_progress"
    assert body["retryable"] is True
    assert body["result"] == result.to_dict()
    assert int(response.headers["retry-after"]) >= 1


def test_malformed_json_is_400_and_writes_nothing(api: Served) -> None:
    with api.client() as client:
        response = client.post(
            "/v1/tasks",
            content=b'{"sender": "PM", "recipient": ',
            headers={"Content-Type": "application/json", "Idempotency-Key": "bad-1"},
        )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "malformed_json"
    assert api.counts() == (0, 0)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sender": "dev"}, "sender"),
        ({"subject": ""}, "subject"),
        ({"priority": "P9"}, "priority"),
        ({"unknown": 1}, "unknown"),
        ({"depends_on": ["not-a-task"]}, "depends_on"),
    ],
)
def test_invalid_fields_are_named(api: Served, change: dict[str, object], field: str) -> None:
    with api.client() as client:
        response = post_task(client, "inv-1", {**REQUEST, **change})
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert response.json()["code"] == "invalid_request"
    assert api.counts() == (0, 0)


def test_oversized_body_is_413_and_writes_nothing(api: Served) -> None:
    huge = {**REQUEST, "body": "x" * (3 * 1024 * 1024)}
    with api.client() as client:
        declared = post_task(client, "big-1", huge)

        def chunks() -> Iterator[bytes]:  # no Content-Length: refused while reading
            data = json.dumps(huge).encode()
            for start in range(0, len(data), 64 * 1024):
                yield data[start : start + 64 * 1024]

        streamed = client.post(
            "/v1/tasks",
            content=chunks(),
            headers={"Content-Type": "application/json", "Idempotency-Key": "big-2"},
        )
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["code"] == "payload_too_large"
    assert api.counts() == (0, 0)


def test_body_over_one_mib_under_limit_is_400(api: Served) -> None:
    with api.client() as client:
        response = post_task(client, "big-3", {**REQUEST, "body": "y" * (1024 * 1024 + 1)})
    assert response.status_code == 400
    assert response.json()["field"] == "body"
    assert api.counts() == (0, 0)


def test_missing_or_unknown_token_is_401(api: Served) -> None:
    for token in (None, "nope"):
        with api.client(token) as client:
            response = post_task(client, "auth-1")
            listing = client.get("/v1/tasks")
        assert response.status_code == 401
        assert listing.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["code"] == "unauthorized"
    assert api.counts() == (0, 0)


def test_tenants_are_isolated(api: Served) -> None:
    with api.client("tok-pm") as acme, api.client("tok-globex") as globex:
        mine = post_task(acme, "shared-id")
        theirs = post_task(globex, "shared-id")
        assert mine.status_code == theirs.status_code == 201  # the id does not collide
        assert mine.json()["task_id"] != theirs.json()["task_id"]
        acme_task = mine.json()["task_id"]
        assert globex.get(f"/v1/tasks/{acme_task}").status_code == 404
        assert acme.get(f"/v1/tasks/{acme_task}").json()["tenant"] == "acme"
        listed = [t["task_id"] for t in globex.get("/v1/tasks").json()["tasks"]]
        assert listed == [theirs.json()["task_id"]]
        post_task(acme, "only-acme")
        assert globex.get("/v1/submissions/only-acme").status_code == 404
        assert acme.get("/v1/submissions/only-acme").json()["state"] == "committed"
        report = {"body": "done", "reporter": "DEV"}
        assert globex.post(f"/v1/tasks/{acme_task}/reports", json=report).status_code in (403, 404)
    assert api.counts() == (3, 3)


def test_roles_act_as_themselves(api: Served) -> None:
    """DEV works the TASK; DEV may not approve (403); PM approves; DEV cannot pose as QA."""
    with api.client("tok-pm") as pm, api.client("tok-dev") as dev:
        task_id = post_task(pm, "flow-1").json()["task_id"]
        moves = f"/v1/tasks/{task_id}/transitions"
        assert pm.post(moves, json={"action": "claim"}).status_code == 403
        assert dev.post(moves, json={"action": "claim"}).json()["bucket"] == "active"
        posing = dev.post(f"/v1/tasks/{task_id}/reports", json={"body": "x", "reporter": "QA"})
        assert posing.status_code == 403
        report = dev.post(f"/v1/tasks/{task_id}/reports", json={"body": "Fixed."})
        assert report.status_code == 201
        assert report.json()["reporter"] == "DEV"
        again = dev.post(f"/v1/tasks/{task_id}/reports", json={"body": "Fixed."})
        assert again.status_code == 200
        assert again.json()["deduplicated"] is True
        assert dev.post(moves, json={"action": "submit"}).json()["bucket"] == "review"
        denied = dev.post(moves, json={"action": "approve"})
        assert denied.status_code == 403
        assert denied.json()["code"] == "not_authorized"
        assert pm.post(moves, json={"action": "approve"}).json()["bucket"] == "done"
        illegal = pm.post(moves, json={"action": "submit"})
        assert illegal.status_code == 409
        assert illegal.json()["code"] == "illegal_transition"
        history = pm.get(f"/v1/tasks/{task_id}/history").json()["history"]
        assert [e["to"] for e in history if e["kind"] == "transition"][-1] == "done"


def test_admin_may_act_as_another_role(api: Served) -> None:
    with api.client("tok-admin") as admin:
        task_id = post_task(admin, "admin-1").json()["task_id"]
        moved = admin.post(
            f"/v1/tasks/{task_id}/transitions", json={"action": "claim", "actor": "DEV"}
        )
    assert moved.status_code == 200
    assert moved.json()["bucket"] == "active"


def test_recover_and_cases_routes(api: Served) -> None:
    with api.client("tok-pm") as pm:
        task_id = post_task(pm, "rec-1").json()["task_id"]
        outcome = pm.post(f"/v1/tasks/{task_id}/recover")
        assert outcome.status_code == 200
        assert outcome.json()["admission"] == "not_admitted"
        assert pm.get("/v1/cases").json() == {"cases": []}
        assert pm.get("/v1/cases/CASE-20200101-001-1").status_code == 404
        review = {"effect": "absent", "note": "checked"}
        assert pm.post("/v1/cases/CASE-20200101-001-1/review", json=review).status_code == 404
        assert pm.post("/v1/cases/X/review", json={"effect": "maybe"}).status_code == 400


def test_list_filters_and_validation(api: Served) -> None:
    with api.client() as client:
        post_task(client, "l-1")
        post_task(client, "l-2", {**REQUEST, "recipient": "QA"})
        assert len(client.get("/v1/tasks", params={"recipient": "QA"}).json()["tasks"]) == 1
        assert len(client.get("/v1/tasks", params={"bucket": "inbox"}).json()["tasks"]) == 2
        assert client.get("/v1/tasks", params={"limit": 1}).json()["limit"] == 1
        bad = client.get("/v1/tasks", params={"bucket": "nowhere"})
        assert bad.status_code == 400
        assert bad.json()["field"] == "bucket"


def test_docs_health_and_metrics(api: Served) -> None:
    with api.client(None) as client:
        docs = client.get("/docs")
        spec = client.get("/openapi.json").json()
        health = client.get("/healthz")
        with api.client() as authed:
            post_task(authed, "m-1")
        with api.client("tok-metrics") as scraper:  # /metrics is the operator's (every tenant)
            metrics = scraper.get("/metrics")
    assert docs.status_code == 200
    # The reference is a plain page: no script from anywhere (Swagger UI's came from a CDN).
    assert "<script" not in docs.text.lower()
    assert "script-src" not in docs.headers["content-security-policy"]
    assert "default-src 'none'" in docs.headers["content-security-policy"]
    assert "/v1/tasks" in docs.text
    assert "/v1/tasks" in spec["paths"]
    assert "Idempotency-Key" in json.dumps(spec["paths"]["/v1/tasks"]["post"])
    assert health.json() == {"status": "ok"}
    assert 'surehand_submissions_total{disposition="created"}' in metrics.text
    assert "surehand_reconcile_pass_seconds" in metrics.text


def test_open_mode_is_local_admin_on_loopback_only(store: Store) -> None:
    for served in serve(store):
        with served.client(None) as client:
            created = post_task(client, "open-1")
        assert created.status_code == 201
        assert served.sh.get_task(created.json()["task_id"]).tenant == "default"
    open_auth = Authenticator(Settings())
    open_auth.check_bind("127.0.0.1", "the API")
    open_auth.check_bind("::1", "the API")
    with pytest.raises(ConfigError, match="SUREHAND_API_TOKENS"):
        open_auth.check_bind("0.0.0.0", "the API")
    Authenticator(Settings(api_tokens=TOKENS)).check_bind("0.0.0.0", "the API")


@pytest.mark.parametrize(
    "spec", ["tok", "tok=name:PM", "tok=name:pm:acme", "tok=name:PM:bad tenant", "=n:PM:t"]
)
def test_bad_token_config_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match="SUREHAND_API_TOKENS"):
        Authenticator(Settings(api_tokens=spec))
