"""No Python child surehand starts imports from its working directory or receives what it does
not need (issue 30, item 3): the outbox publisher child of a real ``surehand api``, a real
``surehand flower`` and the agents' trampoline, each started in a directory where modules they
would import are planted. (Claude Code's hooks start no process: they are http hooks answered
by the session server.)

Before: ``python -m surehand.publisher_child`` and ``python -m celery`` put the working
directory first on ``sys.path``: a planted ``pydantic_settings.py`` ran in the child, which had
the API's whole environment, tokens included.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from surehand import children
from surehand.agents import groups
from surehand.store import Store
from tests.procs import Proc, free_port, private_redis, running, wait_until
from tests.shared.outbox import api_env, published
from tests.submission_helpers import request

SUREHAND_BIN = Path(sys.executable).with_name("surehand")  # how a user starts it
PLANTED = (
    *("pydantic_settings", "sqlalchemy", "celery", "kombu", "redis", "argparse", "ctypes"),
    "flowerconfig",  # Flower executes ./flowerconfig.py by default
)
TOKENS = "api-token-0123456789=alice:PM:acme"
SECRETS = {"SUREHAND_API_TOKENS": TOKENS, "SUREHAND_METRICS_TOKEN": "metrics-0123456789"}


def plant(directory: Path) -> Path:
    """Modules named after what surehand's children import, each leaving a mark if it runs."""
    directory.mkdir(exist_ok=True)
    for name in PLANTED:
        (directory / f"{name}.py").write_text(
            "import pathlib\n"
            f"pathlib.Path(__file__).with_name('RAN-{name}').write_text('planted code ran')\n"
        )
    return directory


def marks(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("RAN-*"))


def start(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> Proc:
    """``surehand ARGS`` as a user starts it (the console script), in ``cwd``."""
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [str(SUREHAND_BIN), *args],
            cwd=cwd,
            env={**os.environ, **env},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Proc(process, log)


def children_of(parent: int, word: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if stat[0] != "Z" and int(stat[1]) == parent and word.encode() in command:
            found.append(int(entry.name))
    return found


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (item.decode(errors="replace").partition("=") for item in raw if item)
    return {name: value for name, _, value in pairs}


def test_the_publisher_child_of_a_real_api_runs_nothing_planted_and_gets_no_token(
    store: Store, tmp_path: Path
) -> None:
    planted = plant(tmp_path / "planted")
    with private_redis(tmp_path) as server:
        env = {**api_env(store, server, publisher="process"), **SECRETS, "UNRELATED_SECRET": "x"}
        port = free_port()
        with running(start(["api", "--port", str(port)], env, planted, tmp_path / "a.log")) as api:
            wait_until(lambda: bool(children_of(api.process.pid, "publisher_child")), timeout=60)
            [child] = children_of(api.process.pid, "publisher_child")
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/tasks",
                json=request(client_submission_id="planted"),
                headers={"Authorization": "Bearer api-token-0123456789"},
                timeout=30,
            )
            assert answer.status_code == 201, answer.text + api.output()
            task_id = answer.json()["task_id"]
            wait_until(lambda: published(store, task_id), timeout=30, what="the publish")
            received = environ_of(child)
    assert marks(planted) == []
    assert "SUREHAND_DATABASE_URL" in received  # what it needs...
    assert not {*SECRETS, "UNRELATED_SECRET"} & set(received)  # ...and nothing else


def test_a_real_flower_runs_nothing_planted_and_gets_no_token(tmp_path: Path) -> None:
    planted = plant(tmp_path / "planted")
    with private_redis(tmp_path) as server:
        env = {
            "SUREHAND_BROKER_URL": server.url,
            "SUREHAND_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            **SECRETS,
            "UNRELATED_SECRET": "x",
        }
        port = free_port()
        with running(start(["flower", "--port", str(port)], env, planted, tmp_path / "f.log")) as f:

            def answers() -> bool:
                try:
                    return httpx.get(f"http://127.0.0.1:{port}/healthcheck").status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(answers, timeout=60, what=f"Flower to start: {f.output()[-2000:]}")
            received = environ_of(f.process.pid)  # Flower replaced `surehand flower`
    assert marks(planted) == []
    assert received["SUREHAND_BROKER_URL"] == server.url
    assert not {*SECRETS, "UNRELATED_SECRET"} & set(received)


def test_the_agents_trampoline_runs_nothing_planted(tmp_path: Path) -> None:
    planted = plant(tmp_path / "planted")
    with (tmp_path / "out").open("wb") as out:
        group = groups.AgentGroup.start(
            ["true"], cwd=planted, env={"PATH": os.environ["PATH"]}, stdout=out, stderr=out
        )
        assert group.process.wait(timeout=30) == 0
    assert marks(planted) == []


def test_the_import_path_drops_the_working_directory_unless_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", str(tmp_path), *sys.path])
    assert str(tmp_path) not in children.import_path()
    assert children.import_path()[0] != ""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the operator's explicit choice
    assert str(tmp_path) in children.import_path()


def test_every_python_child_in_surehand_runs_isolated() -> None:
    """Every command line in surehand/ that starts this interpreter says -I (or is built by
    surehand.children), so a new child cannot quietly import from its working directory."""
    package = Path(children.__file__).parent
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.List) and node.elts and _is_executable(node.elts[0]):
                second = node.elts[1] if len(node.elts) > 1 else None
                isolated = isinstance(second, ast.Constant) and second.value == "-I"
                found.append((str(path.relative_to(package)), node.lineno, isolated))
    assert found, "no command line found: the audit looks in the wrong place"
    assert [where for where in found if not where[2]] == []


def _is_executable(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "executable"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )
