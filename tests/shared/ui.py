"""What other test modules need from ``tests/doors/test_ui.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

TOKENS = "pm=alice:PM:default,dev=dave:DEV:default,admin=ann:ADMIN:default,other=olga:PM:globex"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def browser(app: FastAPI, host: str = "127.0.0.1") -> TestClient:
    return TestClient(app, base_url=f"http://{host}", follow_redirects=False)


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, html[:2000]
    return found.group(1)


def sign_in(client: TestClient, token: str) -> str:
    """Sign in with ``token``; returns the session's CSRF token (from the board's sign-out)."""
    form = client.get("/ui/sign-in")
    assert form.status_code == 200
    answer = client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf_of(form.text)})
    assert answer.status_code == 303, answer.text
    board = client.get("/ui/")
    assert board.status_code == 200, board.text
    return csrf_of(board.text)
