"""CLI start-up imports only what a command uses (issue 12, finding 11; issue 30, item 6):
reading or writing the store never imports Celery, kombu, redis, fakeredis, alembic or the web
stack; ``--help`` and ``surehand effect`` import neither the settings, nor the store, nor the
facade; reading imports no Prometheus client and no command agent machinery.

A behavioural guard, not a timing assertion: ``bench/surfaces/cli_startup.py`` measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import surehand
from surehand.facade import Surehand
from surehand.store import migrate

HEAVY = ("celery", "kombu", "redis", "fakeredis", "alembic", "fastapi", "uvicorn", "mcp")
# What `--help` and `surehand effect` must not import (they neither read settings nor the store).
STORE_AND_SETTINGS = ("pydantic_settings", "sqlalchemy", "surehand.config", "surehand.facade")
# What reading TASKs must not import: counters, their HTTP server, the command agents' machinery.
NOT_FOR_READING = (
    "prometheus_client",
    "wsgiref",
    "surehand.agents.command",
    "surehand.agents.groups",
)

# Runs the CLI's main in-process with the given arguments, then prints the heavy packages
# that ended up imported (stdout carries the command's own output first).
PROBE = """
import json, sys
from surehand.cli import main
heavy = set(json.loads(sys.argv[2]))
sys.argv = ["surehand", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit as exit:
    code = exit.code
else:
    code = 0
loaded = sorted(name for name in heavy if name in sys.modules)
print("\\nPROBE", json.dumps({"code": code, "loaded": loaded}))
"""


def _imports(home: Path, *args: str, watched: tuple[str, ...] = HEAVY, code: int = 0) -> list[str]:
    """The modules of ``watched`` that ``surehand ARGS`` imported (it must exit ``code``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUREHAND_")}
    env["SUREHAND_DATABASE_URL"] = f"sqlite:///{home / 'db.sqlite3'}"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(watched)],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert last.startswith("PROBE "), done.stdout + done.stderr
    found = json.loads(last.removeprefix("PROBE "))
    assert (found["code"] or 0) == code, done.stdout + done.stderr
    return list(found["loaded"])


@pytest.fixture
def store_home(tmp_path: Path) -> tuple[Path, str]:
    """A migrated SQLite store with one TASK."""
    with Surehand(database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}") as sh:
        task_id = str(sh.write_task(sender="PM", recipient="DEV", subject="x").task_id)
    return tmp_path, task_id


def test_tasks_json_imports_no_queue_migration_or_web_stack(store_home: tuple[Path, str]) -> None:
    home, _ = store_home
    assert _imports(home, "tasks", "--json") == []


def test_show_and_submit_without_a_broker_import_none_of_it(store_home: tuple[Path, str]) -> None:
    home, task_id = store_home
    assert _imports(home, "show", task_id) == []
    submit = ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "y", "--json"]
    assert _imports(home, *submit) == []  # nothing to publish to: no Celery
    assert _imports(home, "--help") == []


def test_head_revision_without_alembic_is_alembics() -> None:
    from alembic.script import ScriptDirectory

    assert (
        migrate.head_revision()
        == ScriptDirectory.from_config(migrate._config("")).get_current_head()
    )


def test_the_package_still_exports_its_public_names() -> None:
    from surehand import Surehand as Exported

    assert Exported is Surehand
    assert all(getattr(surehand, name) is not None for name in surehand.__all__)
    assert set(surehand.__all__) <= set(dir(surehand))
    with pytest.raises(AttributeError):
        surehand.not_a_name  # noqa: B018


def test_help_and_effect_import_neither_settings_nor_the_store(tmp_path: Path) -> None:
    """Before: importing surehand.cli imported the facade, the settings (pydantic-settings),
    metrics and SQLAlchemy for every command, `--help` and `effect` (run per declared effect)
    included."""
    assert _imports(tmp_path, "--help", watched=STORE_AND_SETTINGS) == []
    effect = ["effect", "--name", "x", "--", "true"]  # outside a session: refused, exit 6
    assert _imports(tmp_path, *effect, watched=STORE_AND_SETTINGS, code=6) == []


def test_reading_tasks_imports_no_counters_and_no_agent_machinery(
    store_home: tuple[Path, str],
) -> None:
    home, task_id = store_home
    assert _imports(home, "tasks", "--json", watched=(*NOT_FOR_READING, "rich")) == []
    assert _imports(home, "show", task_id, watched=NOT_FOR_READING) == []


def test_the_cli_names_the_settings_model_it_recognises_refusals_of() -> None:
    from surehand.cli.common import SETTINGS_MODEL
    from surehand.config import Settings

    assert Settings.__name__ == SETTINGS_MODEL
