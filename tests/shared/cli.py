"""What other test modules need from ``tests/doors/test_cli.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from tests.procs import SUREHAND

EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_INVALID, EXIT_REFUSED = 3, 4, 5, 6


class Cli:
    """Runs ``python -m surehand`` against one SQLite store."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {**os.environ, "SUREHAND_DATABASE_URL": f"sqlite:///{home / 'db.sqlite3'}"}

    def __call__(
        self, *args: str, code: int | None = 0, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*SUREHAND, *args],
            env={**self.env, **(env or {})},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert code is None or done.returncode == code, (
            f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        return done

    def json(self, *args: str, code: int = 0, env: dict[str, str] | None = None) -> Any:
        return json.loads(self(*args, "--json", code=code, env=env).stdout)

    @property
    def sh(self) -> Surehand:
        return Surehand(database_url=self.env["SUREHAND_DATABASE_URL"])


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


SUBMIT = ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "Fix login"]


def _run(database_url: str, *args: str, columns: int = 80) -> str:
    done = subprocess.run(
        [*SUREHAND, *args],
        env={**os.environ, "SUREHAND_DATABASE_URL": database_url, "COLUMNS": str(columns)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
