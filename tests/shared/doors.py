"""The doors on one store: the Python door (``sh``), the HTTP app on it and a client of it.

A module sets the door's settings with a marker, ``pytest.mark.sh_settings(api_tokens=...)``,
instead of defining its own ``sh``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from surehand.api import create_app
from surehand.config import Settings
from surehand.facade import Surehand
from surehand.store import Store
from tests.shared.marks import marked

TENANT = "acme"
LOOPBACK = ("127.0.0.1", 50000)  # the token-less API answers loopback clients only


@pytest.fixture
def sh(request: pytest.FixtureRequest, store: Store) -> Iterator[Surehand]:
    """The Python door on each database (the local ADMIN of its tenant); an ``sh_settings``
    marker's keywords are its settings besides the database."""
    settings = Settings(database_url=store.url).model_copy(update=marked(request, "sh_settings"))
    handle = Surehand(settings=settings)
    yield handle
    handle.close()


@pytest.fixture
def app(sh: Surehand) -> FastAPI:
    """The HTTP door (API and console) on ``sh``."""
    return create_app(sh)


@pytest.fixture
def http(app: FastAPI) -> Iterator[TestClient]:
    """A client of the HTTP door from loopback (what the token-less, local-ADMIN mode answers)."""
    with TestClient(app, base_url="http://127.0.0.1", client=LOOPBACK) as client:
        yield client
