"""What other test modules need from ``tests/doors/test_console_actions.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from surehand.api import create_app
from tests.recovery_helpers import Rig

TOKENS = "pm=alice:PM:default,pm2=bob:PM:default,dev=dave:DEV:default"


CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def rig_app(rig: Rig) -> FastAPI:
    return create_app(rig.sh)


def signed_in(rig_app: FastAPI, token: str) -> tuple[TestClient, str]:
    client = TestClient(rig_app, base_url="http://127.0.0.1", follow_redirects=False)
    form = client.get("/ui/sign-in").text
    csrf = CSRF.search(form)
    assert csrf is not None
    assert (
        client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf.group(1)}).status_code
        == 303
    )
    board = CSRF.search(client.get("/ui/").text)
    assert board is not None
    return client, board.group(1)
