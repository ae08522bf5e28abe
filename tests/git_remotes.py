"""Real git remotes for the probe tests: a bare repository, a clone that pushes to it, a
``git daemon`` serving it, and a hook planted where a careless git would run it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.procs import free_port

IDENTITY = ("-c", "user.name=Test", "-c", "user.email=test@example.invalid")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}
    done = subprocess.run(
        ["git", *IDENTITY, "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.strip()


@dataclass(frozen=True)
class Remote:
    """A bare remote and a clone of it on ``main``."""

    bare: Path
    work: Path

    @property
    def url(self) -> str:
        return self.bare.as_uri()

    def commit(self, message: str) -> str:
        (self.work / "file.txt").write_text(message)
        git(self.work, "add", "file.txt")
        git(self.work, "commit", "-q", "-m", message)
        return git(self.work, "rev-parse", "HEAD")

    def push(self, ref: str = "main") -> None:
        git(self.work, "push", "-q", "origin", f"HEAD:refs/heads/{ref}")

    def head(self, ref: str = "main") -> str | None:
        listed = git(self.bare, "for-each-ref", "--format=%(objectname)", f"refs/heads/{ref}")
        return listed or None


def make_remote(root: Path) -> Remote:
    bare = root / "remote.git"
    work = root / "work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    git(work, "remote", "add", "origin", bare.as_uri())
    return Remote(bare, work)


def plant_hooks(repo: Path, marker: Path) -> None:
    """Every hook git knows, a file-system monitor and a pack-objects hook that would each
    write ``marker`` if anything ran them."""
    hooks = repo / ("hooks" if (repo / "HEAD").exists() else ".git/hooks")
    hooks.mkdir(parents=True, exist_ok=True)
    script = f'#!/bin/sh\necho ran "$0" >> {marker}\n'
    for name in (
        "pre-receive", "post-receive", "update", "post-update", "reference-transaction",
        "post-checkout", "pre-push", "fsmonitor-watchman", "push-to-checkout",
    ):  # fmt: skip
        path = hooks / name
        path.write_text(script)
        path.chmod(0o755)
    runner = repo.parent / f"{repo.name}-run.sh"
    runner.write_text(script)
    runner.chmod(0o755)
    git(repo, "config", "core.fsmonitor", str(runner))
    git(repo, "config", "uploadpack.packObjectsHook", str(runner))
    git(repo, "config", "core.hooksPath", str(hooks))


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """``git daemon`` serving the repositories under ``base``; yields ``git://host:port``."""
    port = free_port()
    process = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
         f"--base-path={base}", "--listen=127.0.0.1", f"--port={port}", str(base)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # git runs git-daemon as its child: stop the whole group
    )  # fmt: skip
    try:
        _wait_for(port)
        yield f"git://127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _wait_for(port: int) -> None:
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"git daemon did not listen on {port}")


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    """A bare remote with one pushed commit ("base") that logs every ref update it takes."""
    made = make_remote(tmp_path)
    git(made.bare, "config", "core.logAllRefUpdates", "always")  # count every update
    made.commit("base")
    made.push()
    return made
