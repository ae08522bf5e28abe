"""What other test modules need from ``tests/agents/test_agent_clis_real.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surehand.facade import Surehand
from surehand.model import Bucket
from surehand.store import Store
from tests.agent_clis import AgentClis, require_clis
from tests.model_doubles import (
    Call,
    Exchange,
    ModelDouble,
)
from tests.procs import Proc, RedisServer, running, start_worker, wait_until
from tests.session_helpers import read_task
from tests.shared.workers import worker_env

CLAUDE_ENV = {
    "ANTHROPIC_API_KEY": "test-key",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
}


REPORT = "Rotated the keys: ticket OPS-1."


# The model doubles listen on 127.0.0.2: not a loopback name programs reach directly (NO_PROXY),
# so in the sandbox's own network the CLI's requests can only go through the egress proxy.
MODEL_HOST = "127.0.0.2"


def egress(model: ModelDouble) -> str:
    """The model double as SUREHAND_AGENT_EGRESS lists it."""
    return model.url.removeprefix("http://")


@pytest.fixture(scope="module")
def clis() -> AgentClis:
    return require_clis()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A git repository the agent works in."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text("a repository\n")
    return repo


def claude_env(
    store: Store,
    broker: RedisServer,
    tmp_path: Path,
    clis: AgentClis,
    model: ModelDouble,
    sandbox: str = "auto",
) -> dict[str, str]:
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=str(clis.claude),
        SUREHAND_CLAUDE_TOOLS="Bash,Write",
        SUREHAND_AGENT_WORKSPACE=str(tmp_path / "repo"),
        SUREHAND_LEASE_TTL_SECONDS="3",
        SUREHAND_AGENT_SANDBOX=sandbox,
        SUREHAND_AGENT_EGRESS=egress(model),
        SUREHAND_AGENT_ENV=",".join(["ANTHROPIC_BASE_URL", *CLAUDE_ENV]),
        ANTHROPIC_BASE_URL=model.url,
        **CLAUDE_ENV,
    )


def codex_env(
    store: Store,
    broker: RedisServer,
    tmp_path: Path,
    clis: AgentClis,
    model: ModelDouble,
    sessions: Path,
    sandbox: str = "auto",
) -> dict[str, str]:
    """A worker running the codex preset against ``model`` (a custom provider by -c), working
    in ``tmp_path/repo`` with its sessions in ``sessions`` (outside the temp directory)."""
    provider = f'{{name="double",base_url="{model.url}/v1",wire_api="responses"}}'
    overrides = ["-c", "model_provider=double", "-c", f"model_providers.double={provider}"]
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=shlex.join([str(clis.codex), "-m", "gpt-5-codex", *overrides]),
        SUREHAND_AGENT_WORKSPACE=str(tmp_path / "repo"),
        SUREHAND_AGENT_SANDBOX=sandbox,
        SUREHAND_AGENT_EGRESS=egress(model),
        SUREHAND_WORK_DIR=str(sessions),
        SUREHAND_LEASE_TTL_SECONDS="3",
        SUREHAND_AGENT_ENV="OPENAI_API_KEY",
        OPENAI_API_KEY="test-key",
    )


def begun_id(exchange: Exchange) -> int:
    """The operation id of the newest effect_begin answer."""
    for text in reversed(exchange.results):
        if '"operation_id"' in text:
            return int(json.loads(text[text.index("{") : text.rindex("}") + 1])["operation_id"])
    raise AssertionError(f"no effect_begin answer in {exchange.results}")


def submitted(client: Surehand, **task: Any) -> str:
    """Write one TASK from PM to DEV (``task``: other fields, e.g. ``budget_usd``); its id."""
    created = client.write_task(
        sender="PM", recipient="DEV", subject="Rotate the API keys", body="Open a ticket.", **task
    )
    assert created.task_id is not None
    return created.task_id


def settled_by(
    client: Surehand, store: Store, task_id: str, worker: Proc, *, or_held: bool = False
) -> None:
    """Wait until the TASK is settled for review (``or_held``: or held for its approver)."""

    def settled() -> bool:
        if worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
        client.reconciler.run_once()
        task = read_task(store, task_id)
        return task.bucket is Bucket.REVIEW or (or_held and task.hold is not None)

    wait_until(settled, timeout=180, interval=0.5, what=f"{task_id} to be settled")


def worked(
    client: Surehand, store: Store, env: dict[str, str], log: Path, *, or_held: bool = False
) -> str:
    """Start a worker with ``env``, submit one TASK and wait until it is settled for review
    (``or_held``: or held); the worker is stopped on return. The TASK's id."""
    with running(start_worker(env, log)) as worker:
        task_id = submitted(client)
        settled_by(client, store, task_id, worker, or_held=or_held)
        return task_id


@pytest.fixture
def sessions_off_tmp() -> Iterator[Path]:
    """Session directories outside the temporary directory (Codex's own sandbox refuses to
    put its helpers in a CODEX_HOME there)."""
    path = Path.home() / ".cache" / "surehand-test-sessions" / uuid.uuid4().hex
    yield path
    shutil.rmtree(path, ignore_errors=True)


def bash(command: str) -> Call:
    return Call("Bash", {"command": command, "description": "work"})
