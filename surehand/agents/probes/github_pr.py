"""``github.pull_request``: does a pull request from this head branch exist?

Asks the forge's REST API (``SUREHAND_PROBE_GITHUB_URL``, GitHub's by default, or any server
speaking its shape): ``GET /repos/{owner}/{repo}/pulls?head={owner}:{head}&state=all`` (and
``base``). A list with a pull request is *present*, an empty list *absent*, anything else
*inconclusive*. The token, if any, comes from the variable ``SUREHAND_PROBE_GITHUB_TOKEN_ENV``
names; the forge's URL is the operator's, so its host needs no egress entry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from surehand.agents.probes import fetch
from surehand.agents.probes.args import PullRequestArgs
from surehand.agents.probes.result import ProbeResult, inconclusive
from surehand.model import Operation

NAME = "github.pull_request"
VERSION = 1


@dataclass(frozen=True)
class PullRequestProbe:
    """The probe, with the forge's API URL, its token's variable and the time bound."""

    base_url: str
    destinations: fetch.Destinations
    token_env: str = ""
    timeout: float = 10.0
    environ: Mapping[str, str] | None = None

    def __call__(self, operation: Operation) -> ProbeResult:
        return self.check(PullRequestArgs.model_validate(dict(operation.probe_args or {})))

    def url(self, args: PullRequestArgs) -> str:
        owner = args.repo.partition("/")[0]
        query = {"head": f"{owner}:{args.head}", "state": "all", "per_page": "1"}
        if args.base:
            query["base"] = args.base
        return f"{self.base_url.rstrip('/')}/repos/{args.repo}/pulls?{urlencode(query)}"

    def check(self, args: PullRequestArgs) -> ProbeResult:
        url = self.url(args)
        seen: dict[str, Any] = {"url": url}
        try:
            answer = fetch.get(
                url, self.destinations, headers=self._headers(), timeout=self.timeout
            )
        except (fetch.Refused, fetch.Unreachable) as error:
            return inconclusive(f"no answer: {error}", **seen)
        seen["status"] = answer.status
        if answer.status != 200:
            return inconclusive(f"the forge answered {answer.status}", **seen)
        try:
            pulls = json.loads(answer.body)
        except ValueError:
            return inconclusive("the forge's answer is not JSON", **seen)
        if not isinstance(pulls, list):
            return inconclusive("the forge's answer is not a list of pull requests", **seen)
        if pulls and isinstance(pulls[0], Mapping):
            seen["pull_request"] = pulls[0].get("html_url") or pulls[0].get("number")
        return ProbeResult(bool(pulls), seen)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/vnd.github+json", "User-Agent": "surehand-probe/1"}
        token = (os.environ if self.environ is None else self.environ).get(self.token_env, "")
        if self.token_env and token:
            headers["Authorization"] = f"Bearer {token}"
        return headers
