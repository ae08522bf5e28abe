"""``./scripts/test`` tests on the local Postgres and Redis when they answer, and says so."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_backends.py"


def _backends() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_backends", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_backends_named_in_the_environment_are_used_as_they_are() -> None:
    env = {
        "SUREHAND_TEST_DATABASE_URL": "postgresql+psycopg://u@db.example:5432/x",
        "SUREHAND_TEST_REDIS_URL": "redis://cache.example:6379/3",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True
    )
    assert "export SUREHAND_TEST_DATABASE_URL=postgresql+psycopg://u@db.example:5432/x" in (
        done.stdout
    )
    assert "export SUREHAND_TEST_REDIS_URL=redis://cache.example:6379/3" in done.stdout
    assert "SUREHAND_TEST_SKIPPED" not in done.stdout
    assert "testing on SQLite, fakeredis, Postgres" in done.stderr


def test_a_redis_that_does_not_answer_is_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = _backends()
    monkeypatch.setattr(module, "DEFAULT_REDIS", "redis://127.0.0.1:1/15")
    monkeypatch.setenv("SUREHAND_TEST_DATABASE_URL", "postgresql+psycopg://u@h/x")
    monkeypatch.delenv("SUREHAND_TEST_REDIS_URL", raising=False)
    module.main()
    out, err = capsys.readouterr()
    assert "export SUREHAND_TEST_REDIS_URL" not in out
    assert "export SUREHAND_TEST_SKIPPED=" in out
    assert "skipping Redis tests (Redis on 127.0.0.1:6379:" in err
    assert "Connection refused" in err or "connecting" in err
