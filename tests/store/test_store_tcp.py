"""Postgres connections give up on a peer that went away (issue 23): after a worker
container's network was cut and restored, a session on a connection opened before the cut
waited on it for the kernel's ~15 min of retransmissions with its lease alive, its TASK stuck
in active. Every engine the store makes asks libpq for keepalives and a TCP user timeout."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from surehand.store.engine import make_autocommit_engine, make_engine

pytestmark = pytest.mark.postgres


def libpq_parameters(engine: Engine) -> dict[str, str]:
    with engine.connect() as connection:
        raw = connection.connection.driver_connection
        assert raw is not None
        found: dict[str, str] = raw.info.get_parameters()
    engine.dispose()
    return found


def test_every_postgres_engine_gives_up_on_a_dead_peer(pg_url: str) -> None:
    engine = make_engine(pg_url)
    for made in (engine, make_autocommit_engine(engine)):
        parameters = libpq_parameters(made)
        assert parameters["tcp_user_timeout"] == "30000"
        assert (parameters["keepalives"], parameters["keepalives_idle"]) == ("1", "10")
