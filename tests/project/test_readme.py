"""The README as a new user follows it, on a fresh copy of the repository and a fresh venv:
the first command (install, then ``surehand up --demo``), then the tour, top to bottom and
copy-pasted, against a running ``surehand up``. The test command is the one CI runs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.procs import free_port, wait_until
from tests.skips import missing

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Checkout:
    """A fresh copy of the repository whose README first command has run."""

    path: Path
    first: subprocess.CompletedProcess[str]
    env: dict[str, str]


def _index_reachable() -> bool:
    probe = [sys.executable, "-m", "pip", "index", "versions", "pip"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _blocks(section: str, language: str) -> list[str]:
    """The ``language`` code blocks of the README section whose heading is ``section`` (up to
    the next heading; a ``#`` line inside a code block is a comment, not a heading)."""
    lines = README.splitlines()
    start = lines.index(section)
    fenced, end = False, len(lines)
    for number, line in enumerate(lines[start + 1 :], start + 1):
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("#"):
            end = number
            break
    text = "\n".join(lines[start:end]) + "\n"
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def _commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, comment-only lines left out."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    if os.environ.get("SUREHAND_TEST_FRESH_VENV") == "0" or not _index_reachable():
        missing("a reachable package index for the README's fresh venv (or FRESH_VENV=0)")
    path = tmp_path_factory.mktemp("readme") / "checkout"
    ignored = shutil.ignore_patterns(".venv", ".git", ".surehand", "__pycache__", "*.egg-info")
    shutil.copytree(REPO, path, ignore=ignored)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUREHAND_")}
    env |= {"SUREHAND_API_PORT": "0", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    first = _commands(_blocks("# surehand", "bash")[0])[0]
    done = subprocess.run(
        ["bash", "-c", first], cwd=path, env=env, capture_output=True, text=True, timeout=600
    )
    return Checkout(path, done, env)


@pytest.fixture
def serving(checkout: Checkout) -> Iterator[int]:
    """``.venv/bin/surehand up`` in the checkout, as the tour starts it; yields its API port."""
    port = free_port()
    log = (checkout.path / "up.log").open("wb")
    process = subprocess.Popen(
        [".venv/bin/surehand", "up"],
        cwd=checkout.path,
        env=checkout.env | {"SUREHAND_API_PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _healthy(port), timeout=90, what="surehand up's API")
        yield port
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
        log.close()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _run(checkout: Checkout, command: str, port: int) -> str:
    command = command.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=checkout.path,
        env=checkout.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def _promised(command: str) -> list[str]:
    """What the command's trailing comment says it answers: created / reused."""
    comment = command.partition("#")[2]
    return [word for word in ("created", "reused") if word in comment]


def test_the_first_command_runs_the_demo_and_the_second_is_what_ci_runs(
    checkout: Checkout,
) -> None:
    first, second = _commands(_blocks("# surehand", "bash")[0])[:2]
    assert "surehand up --demo" in first
    assert second in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    done = checkout.first
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "REPORT by DEV" in done.stdout


def test_the_tour_works_top_to_bottom_as_written(checkout: Checkout, serving: int) -> None:
    for command in _commands(_blocks("## A tour", "bash")[0]):
        output = _run(checkout, command, serving)
        for word in _promised(command):
            assert word in output, f"{command}\n{output}"
        if "show --id" in command:
            assert "Users on Safari cannot log in." in output, output
    python = _blocks("## A tour", "python")[0].split("\n@sh.agent")[0]
    output = _run(checkout, f".venv/bin/python - <<'EOF'\n{python}\nEOF", serving)
    assert output.startswith("reused TASK-"), output


def _promised_status(command: str) -> str | None:
    """The HTTP status the command's trailing comment promises (``# 201 created``), if any."""
    found = re.match(r"\s*(\d{3})\b", command.partition("#")[2])
    return found.group(1) if found else None


def test_the_http_tour_creates_then_reuses_and_lists(checkout: Checkout, serving: int) -> None:
    outputs = []
    statuses = []
    for command in _commands(_blocks("### Over HTTP", "bash")[0]):
        status = _promised_status(command)
        if status:  # curl prints the status it got on a line of its own, after the body
            command = command.replace("curl -s ", "curl -s -w '\\n%{http_code}' ", 1)
        outputs.append(output := _run(checkout, command, serving))
        if status:
            statuses.append((status, output.rsplit("\n", 1)[-1]))
        for word in _promised(command):
            assert f'"disposition":"{word}"' in output, f"{command}\n{output}"
    assert statuses == [("201", "201"), ("200", "200")]  # (promised, answered)
    assert "Fix the signup page" in outputs[-1]
