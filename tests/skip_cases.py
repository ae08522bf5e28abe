"""Cases for ``tests/project/test_skips.py``: its subprocess runs name this file on pytest's command
line (it is not ``test_*.py``, so the suite itself never collects it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.procs import RedisServer
from tests.skips import not_applicable


def test_needs_a_redis_server(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()  # redis-server is off this run's PATH
    server.stop()


def test_skips_with_a_reason_of_its_own() -> None:
    pytest.skip("the package index is slow today")


def test_does_not_apply_by_design() -> None:
    not_applicable("SQLite runs in-process: no round trips")


def test_does_not_apply_for_a_reason_off_the_allowlist() -> None:
    not_applicable("it is Tuesday")
