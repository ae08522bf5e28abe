"""``git.push``: does the remote's ref contain the commit that was to be pushed?

Asked by admission, in the worker or beat (never in the sandbox), with the hardened git of
:mod:`surehand.agents.worker_git` (no hooks, no file-system monitor, no ``ext::``, a scrubbed
environment) and a timeout. First ``git ls-remote`` of the one ref: the ref at the commit is
*present*; the remote answering without the ref is *absent*. A ref at another commit may have
moved on past it, so that ref is fetched into a scratch repository (a temporary directory,
removed after) and the commit is present if it is among the ref's history, absent if not.
Anything else -- the remote unreachable, git failing, the timeout -- is *inconclusive*.

The remote is the agent's declaration, so a network remote (``http(s)``, ``git``, ``ssh``,
``host:path``) goes only where the agent's own traffic may: its host and port must be on the
egress allowlist, checked like the HTTP probes' (:mod:`.fetch`: the worker's loopback and
private ranges need an entry naming them exactly), unless it is the URL of a remote of a
repository the operator named in ``SUREHAND_AGENT_WORKSPACE`` (what the push recogniser
records). Without this an agent could have the worker, outside its sandbox, send git's
requests to the worker's loopback or a metadata address. An ``http(s)`` remote is pinned to
the checked address (``http.curloptResolve``) and no redirect is followed. A local remote (a
path, ``file://``) is read as data by the hardened git.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from surehand.agents import worker_git
from surehand.agents.egress import Allowlist
from surehand.agents.probes import fetch
from surehand.agents.probes.args import GitPushArgs
from surehand.agents.probes.result import ProbeResult, inconclusive
from surehand.model import Operation

NAME = "git.push"
VERSION = 1
SCRATCH_REF = "refs/surehand-probe/pushed"
# git follows an http remote's first redirect by default: an allowed server could send the
# probe on to an address only the worker reaches, past the check of the remote's own address.
NO_REDIRECTS = ("-c", "http.followRedirects=false")
PORTS = {"http": 80, "https": 443, "git": 9418, "ssh": 22}
SCP_LIKE = re.compile(r"\A(?:[^@/]*@)?(\[[^\]]*\]|[^:/\[]+):(?!//)")


@dataclass(frozen=True)
class GitPushProbe:
    """The probe, with the seconds each git command may take, where a network remote may be
    (the egress allowlist; none by default) and the operator's repositories' remote URLs."""

    timeout: float = 30.0
    destinations: fetch.Destinations = field(
        default_factory=lambda: fetch.Destinations(Allowlist(()))
    )
    trusted: Callable[[], Collection[str]] = tuple

    def __call__(self, operation: Operation) -> ProbeResult:
        args = GitPushArgs.model_validate(dict(operation.probe_args or {}))
        return self.check(args)

    def check(self, args: GitPushArgs) -> ProbeResult:
        seen = {"remote": args.remote, "ref": args.ref, "commit": args.commit}
        try:
            pin = self._destination(args.remote)
        except (fetch.Refused, fetch.Unreachable) as refused:
            return inconclusive(f"refused: {refused}", **seen)
        listed = self._git(Path("/"), *pin, "ls-remote", "--refs", args.remote, args.ref)
        if listed is None:
            return inconclusive("the remote did not answer (git ls-remote failed)", **seen)
        remote_commit = _ref_commit(listed, args.ref)
        seen["remote_ref"] = remote_commit or "(absent)"
        if remote_commit is None:
            return ProbeResult(False, seen)
        if remote_commit == args.commit:
            return ProbeResult(True, seen)
        return self._contains(args, seen, pin)

    def _contains(
        self, args: GitPushArgs, seen: dict[str, str], pin: tuple[str, ...]
    ) -> ProbeResult:
        """Whether the ref's history (fetched into a scratch repository) has the commit."""
        with tempfile.TemporaryDirectory(prefix="surehand-probe-") as scratch:
            repo = Path(scratch)
            if self._git(repo, "init", "--quiet", "--bare") is None:
                return inconclusive("could not make a scratch repository", **seen)
            fetched = self._git(
                repo, *pin, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                "--no-recurse-submodules", args.remote, f"+{args.ref}:{SCRATCH_REF}",
            )  # fmt: skip
            if fetched is None:
                return inconclusive("the remote's ref could not be fetched", **seen)
            ancestor = self._status(repo, "merge-base", "--is-ancestor", args.commit, SCRATCH_REF)
        if ancestor is None:
            return inconclusive("git could not compare the commits", **seen)
        seen["contains"] = "yes" if ancestor else "no"
        return ProbeResult(ancestor, seen)

    def _destination(self, remote: str) -> tuple[str, ...]:
        """git's options pinning the remote to its checked address; Refused when a network
        remote is not on the allowlist (a repository's own remote always may be asked)."""
        where = network_destination(remote)
        if where is None or remote in self.trusted():
            return ()
        scheme, host, port = where
        addresses = self.destinations.check(host, port)
        if scheme not in ("http", "https"):
            return ()
        address = f"[{addresses[0]}]" if addresses[0].version == 6 else str(addresses[0])
        return ("-c", f"http.curloptResolve={host}:{port}:{address}")

    def _git(self, repo: Path, *args: str) -> str | None:
        done = self._run(repo, *args)
        return done.stdout if done is not None and done.returncode == 0 else None

    def _status(self, repo: Path, *args: str) -> bool | None:
        """True (exit 0), False (exit 1: the commit is not an ancestor, or not fetched)."""
        done = self._run(repo, *args)
        if done is None or done.returncode not in (0, 1, 128):
            return None
        return done.returncode == 0

    def _run(self, repo: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(
                worker_git.command(repo, *NO_REDIRECTS, *args),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env=worker_git.environment(),
                stdin=subprocess.DEVNULL,
                cwd=repo,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None


def _ref_commit(listed: str, ref: str) -> str | None:
    for line in listed.splitlines():
        commit, _, name = line.partition("\t")
        if name.strip() == ref:
            return commit.strip().lower()
    return None


def network_destination(remote: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a remote git reaches over the network; None for a local one."""
    if "://" in remote:
        parts = urlsplit(remote)
        if parts.scheme == "file":
            return None
        try:
            port = parts.port
        except ValueError:
            raise fetch.Refused(f"{remote!r} has no valid port") from None
        return parts.scheme, parts.hostname or "", port or PORTS.get(parts.scheme, 0)
    scp = SCP_LIKE.match(remote)
    if scp is None or remote.startswith("/"):
        return None  # a path (git takes "dir/x:y" with a slash before the colon as one)
    return "ssh", scp.group(1).strip("[]"), PORTS["ssh"]
