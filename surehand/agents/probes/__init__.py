"""Built-in probes: named, versioned, registered in every deciding process.

Each answers whether an interrupted effect happened from what it can see outside the sandbox,
never from the agent's say-so (DESIGN.md section 9): ``git.push`` (:mod:`.git_push`),
``http.request`` (:mod:`.http_request`), ``github.pull_request`` (:mod:`.github_pr`). Their
arguments are declared with the effect and validated at every door (:mod:`.args`). An
operator's probe of the same name (``SUREHAND_PROBES``, ``@sh.probe``) takes its place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from surehand.agents.probes.args import check_probe_args
from surehand.agents.probes.result import ProbeResult

if TYPE_CHECKING:
    from surehand.config import Settings

VERSIONS = {"git.push": 1, "http.request": 1, "github.pull_request": 1}


def builtin_probes(settings: Settings) -> dict[str, Callable[..., Any]]:
    """The built-in probes, configured by ``settings``, by name."""
    from urllib.parse import urlsplit

    from surehand.agents.egress import Allowlist
    from surehand.agents.probes import fetch, git_push, github_pr, http_request

    allowlist = Allowlist.parse(f"{settings.agent_egress},{settings.probe_egress}")
    timeout = settings.probe_timeout_seconds
    forge = urlsplit(settings.probe_github_url)
    trusted = (f"{forge.hostname}:{forge.port or (443 if forge.scheme == 'https' else 80)}",)
    credentials = http_request.parse_credentials(settings.probe_credentials)
    return {
        git_push.NAME: git_push.GitPushProbe(
            timeout, fetch.Destinations(allowlist), lambda: repository_remotes(settings)
        ),
        http_request.NAME: http_request.HttpRequestProbe(
            fetch.Destinations(allowlist), credentials, timeout
        ),
        github_pr.NAME: github_pr.PullRequestProbe(
            settings.probe_github_url,
            fetch.Destinations(allowlist, trusted),
            settings.probe_github_token_env,
            timeout,
        ),
    }


def repository_remotes(settings: Settings) -> frozenset[str]:
    """The remote URLs of the repositories ``SUREHAND_AGENT_WORKSPACE`` names (``worktree:``
    entries): the operator's, asked by ``git.push`` wherever they are (read as data, now)."""
    from surehand.agents.workspaces import Workspaces, remotes_of
    from surehand.errors import ConfigError

    try:
        resolved = Workspaces.parse(settings.agent_workspace)
    except ConfigError:
        return frozenset()  # a bad setting stops the worker at its start, not here
    specs = [resolved.default, *resolved.by_role.values()]
    return frozenset(
        url for spec in specs if spec and spec.worktree for _name, url in remotes_of(spec.path)
    )


def described(name: str) -> str:
    """``git.push@1`` for a built-in probe, the name alone for an operator's."""
    version = VERSIONS.get(name)
    return f"{name}@{version}" if version else name


__all__ = ["VERSIONS", "ProbeResult", "builtin_probes", "check_probe_args", "described"]
