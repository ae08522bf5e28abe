"""A hostile agent under a real ``surehand worker``: everything it tries past its session is
refused or contained, the worker and a sibling session keep working, and a TASK whose session
it broke goes through admission (held for its approver).

The agent (``tests/hostile_agent.py``) runs as the ``codex`` preset's program (a stand-in
``codex`` on PATH), so its report file is read as Codex's would be. Each probe is one TASK.
With bubblewrap every probe is refused or contained; in the fallback (``none``) the test
asserts exactly what docs/agents/sandbox.md ("What an agent can reach") says that mode promises
and what it does not: a program there sees the host's files and processes as the worker's user does.
"""

# ruff: noqa: F811  (test functions take the fixtures imported below)

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from surehand.agents import environment
from surehand.facade import Surehand
from surehand.model import Bucket
from surehand.store import Store
from surehand.store.engine import sqlite_file
from tests.agent_procs import marked, require_proc, unique_seconds
from tests.procs import Proc, RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.skips import not_applicable
from tests.test_agent_groups import reconciling_client  # noqa: F401  (fixture)
from tests.test_workers import broker, worker_env  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

AGENT = Path(__file__).parent / "hostile_agent.py"
SECRETS = {
    "SUREHAND_API_TOKENS": "SECRET-admin-token-0123456789abcdef=ops:ADMIN:default",
    "SUREHAND_METRICS_TOKEN": "SECRET-metrics-token-0123456789abcdef",
}
SESSION_NAMES = set(environment.SESSION_NAMES)
INHERITED = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "OPENAI_API_KEY"}
PRESET_MADE = {"CODEX_HOME"}  # the codex preset's home for the CLI: the session's own
SHELL_MADE = {"PWD", "OLDPWD", "SHLVL", "_"}  # what the stand-in's /bin/sh sets itself
PROXY_NAMES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")
NETWORK_MADE = {*PROXY_NAMES, *map(str.lower, PROXY_NAMES)}  # the egress proxy, its session's
MEMORY_MIB = 256
ROOTFS_TARGET = Path(f"/var/tmp/surehand-hostile-{os.getpid()}")  # a host path off the session


@dataclass
class Deployment:
    """A worker whose DEV agent is the hostile program, and a handle on its store."""

    mode: str
    client: Surehand
    worker: Proc
    tmp_path: Path
    store: Store

    def submit(self, probe: str, **params: Any) -> str:
        body = "HOSTILE " + json.dumps({"probe": probe, **params})
        created = self.client.write_task(
            sender="PM", recipient="DEV", subject=f"probe {probe}", body=body
        )
        assert created.task_id is not None
        return created.task_id

    def finished(self, task_id: str) -> bool:
        """Settled in review, or held for its approver (a case decided by admission)."""
        self.client.reconciler.run_once()
        if self.worker.returncode is not None:
            pytest.fail(f"the worker exited:\n{self.worker.output()[-3000:]}")
        task = read_task(self.store, task_id)
        return task.bucket is Bucket.REVIEW or task.hold is not None

    def run(self, probe: str, **params: Any) -> str:
        task_id = self.submit(probe, **params)
        wait_until(lambda: self.finished(task_id), timeout=90, what=f"probe {probe} to finish")
        return task_id

    def findings(self, task_id: str) -> dict[str, Any]:
        reports = reports_of(self.store, task_id)
        if len(reports) != 1:
            errors = [attempt.error for attempt in attempts_of(self.store, task_id)]
            pytest.fail(f"{task_id} has {len(reports)} REPORTs; its attempts ended: {errors}")
        return dict(json.loads(reports[0].body))

    def worker_rss_mib(self) -> float:
        status = Path(f"/proc/{self.worker.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024


def hostile_env(
    store: Store, broker: RedisServer, tmp_path: Path, mode: str, **extra: str
) -> dict[str, str]:
    """A worker whose DEV agent is the hostile program (a stand-in ``codex`` on PATH), in
    sandbox ``mode``; with ``extra`` settings."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text(f'#!/bin/sh\nexec {sys.executable} {AGENT} "$@"\n')
    (bin_dir / "codex").chmod(0o755)
    return worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT="codex",
        SUREHAND_AGENT_SANDBOX=mode,
        SUREHAND_CODEX_SANDBOX="danger-full-access",  # a stand-in: no helpers under /tmp
        SUREHAND_AGENT_BIND=f"{bin_dir}:ro,{AGENT.parent}:ro",  # the probes; nothing of tmp_path
        SUREHAND_CONCURRENCY="4",
        PATH=f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        **extra,
    )


@pytest.fixture
def hostile_settings() -> dict[str, str]:
    """What a module's hostile worker sets besides (a module overrides this fixture)."""
    return {}


@pytest.fixture(params=["bwrap", "none"])
def deployment(
    request: pytest.FixtureRequest,
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    hostile_settings: dict[str, str],
) -> Iterator[Deployment]:
    require_proc()
    if request.param == "none" and sqlite_file(store.url) is None:
        # Not applicable: what the fallback cannot hide does not depend on the store (its
        # answers that do -- the session tools' -- are asserted with bwrap on both stores).
        not_applicable("the fallback's limits are the same on every store")
    (tmp_path / "secret.txt").write_text("SECRET of the host")
    env = hostile_env(
        store,
        broker,
        tmp_path,
        str(request.param),
        SUREHAND_AGENT_ENV="OPENAI_API_KEY",
        SUREHAND_AGENT_MEMORY_MIB=str(MEMORY_MIB),
        OPENAI_API_KEY="sk-allowed-by-the-operator",
        **SECRETS,
        **hostile_settings,
    )
    with running(start_worker(env, tmp_path / "worker.log", concurrency=4)) as worker:
        yield Deployment(str(request.param), reconciling_client, worker, tmp_path, store)


def observe(deployment: Deployment, store: Store) -> dict[str, Any]:
    """Run every probe (a sibling session working meanwhile); what each one ended with."""
    tmp_path, mark = deployment.tmp_path, unique_seconds()
    sibling = deployment.submit("sleep", seconds=8)
    wait_until(lambda: bool(attempts_of(deployment.store, sibling)), timeout=60, what="the sibling")
    database = sqlite_file(store.url) or tmp_path / "no-sqlite-store-on-postgres"
    rss_before = deployment.worker_rss_mib()
    probes = {
        "siblings": deployment.submit("siblings", sibling=sibling),
        "env": deployment.submit("env"),
        "files": deployment.submit(
            "files",
            store=str(database),
            sessions=str(tmp_path / "sessions"),
            secret=str(tmp_path / "secret.txt"),
            outside=str(tmp_path / "outside.txt"),
            rootfs=str(ROOTFS_TARGET),
        ),
        "escape": deployment.submit("escape", mark=mark),
        "fork_bomb": deployment.submit("fork_bomb"),
        "memory_hog": deployment.submit("memory_hog", mib=MEMORY_MIB * 2),
        "tools": deployment.submit("tools"),
        "sparse_stdout": deployment.submit("sparse_stdout"),
        "nul_stdout": deployment.submit("nul_stdout"),
        **{
            probe: deployment.submit(probe, target=str(tmp_path / "secret.txt"))
            for probe in ("fifo", "symlink", "sparse")
        },
    }
    for name, task_id in [*probes.items(), ("sibling", sibling)]:
        wait_until(
            functools.partial(deployment.finished, task_id), timeout=120, what=f"probe {name}"
        )
    seen: dict[str, Any] = {
        name: verdict(deployment, name, task_id) for name, task_id in probes.items()
    }
    seen["escape"]["left_running"] = marked(mark)
    seen["sibling"] = read_task(deployment.store, sibling).bucket.value
    seen["worker_grew_mib_over_64"] = deployment.worker_rss_mib() - rss_before > 64
    seen["worker_alive"] = deployment.worker.returncode is None
    return seen


def verdict(deployment: Deployment, name: str, task_id: str) -> dict[str, Any]:
    """A probe's findings (its REPORT), or how its attempt ended and whether it is held."""
    task = read_task(deployment.store, task_id)
    if task.bucket is Bucket.REVIEW and name == "nul_stdout":
        return {"report": reports_of(deployment.store, task_id)[0].body}
    if task.bucket is Bucket.REVIEW:
        findings = deployment.findings(task_id)
        return _summary(name, findings) if name in SUMMARIES else findings
    [attempt] = attempts_of(deployment.store, task_id)
    error = attempt.error or ""
    return {
        "held": task.hold is not None,
        "refused_output": "AgentOutputRefused: the agent's report file last-message.txt" in error,
        "killed": any(f"command exited with {code}:" in error for code in (-9, 137)),
    }


def _summary(name: str, findings: dict[str, Any]) -> dict[str, Any]:
    return SUMMARIES[name](findings)


SUMMARIES = {
    "env": lambda f: {
        "leaked": f["leaked"],
        "unexpected_names": sorted(
            set(f["names"]) - SESSION_NAMES - INHERITED - SHELL_MADE - PRESET_MADE - NETWORK_MADE
        ),
        "operator_key": "OPENAI_API_KEY" in f["names"],
    },
    "fork_bomb": lambda f: {"capped": 0 < f["children"] < 256},
    "siblings": lambda f: {
        "sibling_tokens": min(f["sibling_tokens"], 1),
        "environs_with_secrets": min(f["environs_with_secrets"], 1),
        "workers_visible": min(f["workers_visible"], 1),
        "few_processes": f["visible_processes"] <= 4,
        "own_token_on_sibling": f["answers"]["own_token_on_sibling"],
        "stolen_tokens_accepted": min(f["answers"]["stolen_tokens_accepted"], 1),
    },
    "files": lambda f: {
        "modes": (f["dir_mode"], f["task_mode"]),
        "store": f["store"].startswith("refused") or f["store"] == "done: b''",
        "sessions": f["sessions"],
        "groups": f["groups"].startswith("refused"),
        "outputs": f["outputs"].startswith("refused"),
        "secret": f["secret"],
        "write_rootfs": f["write_rootfs"],
    },
}


def expected(mode: str, sqlite: bool) -> dict[str, Any]:
    """What each probe must end with; in the fallback, what docs/agents/sandbox.md says it
    cannot hide."""
    contained = {"held": True, "refused_output": False, "killed": True}
    refused_output = {"held": True, "refused_output": True, "killed": False}
    bwrap = mode == "bwrap"
    return {
        "env": {"leaked": [], "unexpected_names": [], "operator_key": True},
        "siblings": {
            "sibling_tokens": 0 if bwrap else 1,  # the fallback: a sibling's environ is readable
            "environs_with_secrets": 0 if bwrap else 1,  # and the root worker's
            "workers_visible": 0 if bwrap else 1,
            "few_processes": bwrap,
            "own_token_on_sibling": 403,
            "stolen_tokens_accepted": 0 if bwrap else 1,  # what the fallback cannot prevent
        },
        "files": {
            "modes": ("0o700", "0o600"),
            "store": bwrap or not sqlite,  # (on Postgres there is no store file to open)
            "sessions": "done: []" if bwrap else ANY_LISTING,
            "groups": bwrap,
            "outputs": bwrap,
            "secret": "refused: No such file or directory" if bwrap else "done: SECRET of the host",
            "write_rootfs": "refused: No such file or directory" if bwrap else ANY_DONE,  # no /var
        },
        "escape": {"left_behind": ANY_MARK, "left_running": []},
        "fork_bomb": {"capped": True},
        "memory_hog": contained,
        "tools": {
            "name_nul": "invalid_request",
            "name_markdown": "invalid_request",
            "args_nul": "invalid_request",
            "args_surrogate": -32700,  # the MCP server's JSON parser refuses it: parse error
            "markdown_args": "begun",
            "huge_body": 413,
        },
        "sparse_stdout": {"write": "File too large"},  # the file size limit
        "nul_stdout": {"report": "before\ufffdafter"},  # a NUL byte is no broken session
        "fifo": refused_output,
        "symlink": refused_output,
        "sparse": refused_output,
        "sibling": "review",
        "worker_grew_mib_over_64": False,
        "worker_alive": True,
    }


class _Matches:
    """Equal to any value the predicate accepts (shown as ``what`` in a failed comparison)."""

    def __init__(self, what: str, accepts: Any) -> None:
        self.what, self.accepts = what, accepts

    def __eq__(self, other: object) -> bool:
        return bool(self.accepts(other))

    def __hash__(self) -> int:
        return hash(self.what)

    def __repr__(self) -> str:
        return self.what


ANY_LISTING = _Matches("a listing", lambda v: str(v).startswith("done: ["))
ANY_DONE = _Matches("done", lambda v: str(v).startswith("done"))
ANY_MARK = _Matches("the mark", lambda v: isinstance(v, str))


def test_a_hostile_agent_is_refused_or_contained_every_time(
    deployment: Deployment, store: Store
) -> None:
    try:
        seen = observe(deployment, store)
    finally:
        ROOTFS_TARGET.unlink(missing_ok=True)  # written only in the fallback

    assert seen == expected(deployment.mode, sqlite_file(store.url) is not None)
    if deployment.mode == "bwrap":  # nothing written to the host's files
        assert not (deployment.tmp_path / "outside.txt").exists()
