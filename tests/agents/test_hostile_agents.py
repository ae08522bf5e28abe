"""A hostile agent under a real ``surehand worker``: everything it tries past its session is
refused or contained, the worker and a sibling session keep working, and a TASK whose session
it broke goes through admission (held for its approver).

The agent (``tests/hostile_agent.py``) runs as the ``codex`` preset's program (a stand-in
``codex`` on PATH), so its report file is read as Codex's would be. Each probe is one TASK.
With bubblewrap every probe is refused or contained; in the fallback (``none``) the test
asserts exactly what docs/agents/sandbox.md ("What an agent can reach") says that mode promises
and what it does not: a program there sees the host's files and processes as the worker's user does.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from surehand.agents import environment
from surehand.model import Bucket
from surehand.store import Store
from surehand.store.engine import sqlite_file
from tests.agent_procs import marked, unique_seconds
from tests.procs import wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.hostile_agents import MEMORY_MIB, Deployment

pytestmark = pytest.mark.slow

SESSION_NAMES = set(environment.SESSION_NAMES)
INHERITED = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "OPENAI_API_KEY"}
PRESET_MADE = {"CODEX_HOME"}  # the codex preset's home for the CLI: the session's own
SHELL_MADE = {"PWD", "OLDPWD", "SHLVL", "_"}  # what the stand-in's /bin/sh sets itself
PROXY_NAMES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")
NETWORK_MADE = {*PROXY_NAMES, *map(str.lower, PROXY_NAMES)}  # the egress proxy, its session's
ROOTFS_TARGET = Path(f"/var/tmp/surehand-hostile-{os.getpid()}")  # a host path off the session


def observe(hostile_deployment: Deployment, store: Store) -> dict[str, Any]:
    """Run every probe (a sibling session working meanwhile); what each one ended with."""
    tmp_path, mark = hostile_deployment.tmp_path, unique_seconds()
    sibling = hostile_deployment.submit("sleep", seconds=8)
    wait_until(
        lambda: bool(attempts_of(hostile_deployment.store, sibling)), timeout=60, what="the sibling"
    )
    database = sqlite_file(store.url) or tmp_path / "no-sqlite-store-on-postgres"
    rss_before = hostile_deployment.worker_rss_mib()
    probes = {
        "siblings": hostile_deployment.submit("siblings", sibling=sibling),
        "env": hostile_deployment.submit("env"),
        "files": hostile_deployment.submit(
            "files",
            store=str(database),
            sessions=str(tmp_path / "sessions"),
            secret=str(tmp_path / "secret.txt"),
            outside=str(tmp_path / "outside.txt"),
            rootfs=str(ROOTFS_TARGET),
        ),
        "escape": hostile_deployment.submit("escape", mark=mark),
        "fork_bomb": hostile_deployment.submit("fork_bomb"),
        "memory_hog": hostile_deployment.submit("memory_hog", mib=MEMORY_MIB * 2),
        "tools": hostile_deployment.submit("tools"),
        "sparse_stdout": hostile_deployment.submit("sparse_stdout"),
        "nul_stdout": hostile_deployment.submit("nul_stdout"),
        **{
            probe: hostile_deployment.submit(probe, target=str(tmp_path / "secret.txt"))
            for probe in ("fifo", "symlink", "sparse")
        },
    }
    for name, task_id in [*probes.items(), ("sibling", sibling)]:
        wait_until(
            functools.partial(hostile_deployment.finished, task_id),
            timeout=120,
            what=f"probe {name}",
        )
    seen: dict[str, Any] = {
        name: verdict(hostile_deployment, name, task_id) for name, task_id in probes.items()
    }
    seen["escape"]["left_running"] = marked(mark)
    seen["sibling"] = read_task(hostile_deployment.store, sibling).bucket.value
    seen["worker_grew_mib_over_64"] = hostile_deployment.worker_rss_mib() - rss_before > 64
    seen["worker_alive"] = hostile_deployment.worker.returncode is None
    return seen


def verdict(hostile_deployment: Deployment, name: str, task_id: str) -> dict[str, Any]:
    """A probe's findings (its REPORT), or how its attempt ended and whether it is held."""
    task = read_task(hostile_deployment.store, task_id)
    if task.bucket is Bucket.REVIEW and name == "nul_stdout":
        return {"report": reports_of(hostile_deployment.store, task_id)[0].body}
    if task.bucket is Bucket.REVIEW:
        findings = hostile_deployment.findings(task_id)
        return _summary(name, findings) if name in SUMMARIES else findings
    [attempt] = attempts_of(hostile_deployment.store, task_id)
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
    hostile_deployment: Deployment, store: Store
) -> None:
    try:
        seen = observe(hostile_deployment, store)
    finally:
        ROOTFS_TARGET.unlink(missing_ok=True)  # written only in the fallback

    assert seen == expected(hostile_deployment.mode, sqlite_file(store.url) is not None)
    if hostile_deployment.mode == "bwrap":  # nothing written to the host's files
        assert not (hostile_deployment.tmp_path / "outside.txt").exists()
