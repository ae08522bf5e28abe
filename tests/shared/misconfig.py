"""What other test modules need from ``tests/processes/test_misconfig.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.procs import SUREHAND

REPO = Path(__file__).resolve().parents[2]


UNUSED_REDIS = "redis://127.0.0.1:1/0"  # never contacted: the refusals come first


def surehand(
    cwd: Path, *args: str, code: int | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m surehand ARGS`` in ``cwd`` with no SUREHAND_* setting but ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SUREHAND_", "FLOWER_"))}
    done = subprocess.run(
        [*SUREHAND, *args],
        env={**base, "PYTHONPATH": str(REPO), "COLUMNS": "250", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if code is not None:
        assert done.returncode == code, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """An existing, migrated SQLite store."""
    url = sqlite_url(tmp_path / "surehand.sqlite3")
    surehand(tmp_path, "db", "upgrade", code=0, SUREHAND_DATABASE_URL=url)
    return url
