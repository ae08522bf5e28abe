"""The real agent CLIs (Claude Code, Codex) at pinned versions, installed with npm once.

They are installed into a cache outside the repository (``~/.cache/surehand-agent-clis/<key>``,
``SUREHAND_AGENT_CLIS_CACHE`` to move it), keyed by their versions, so a version bump installs
afresh and nothing lands in the work tree. ``.ci/run`` installs them the same way before the
tests. Where npm is missing or the install fails, a test that needs them is skipped as
``missing`` (tests/skips.py), except in CI (``CI=true``), where it fails: CI must run them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
CODEX = "@openai/codex@0.171.0"
PACKAGES = (CLAUDE_CODE, CODEX)
KEY = "claude-2.1.332-codex-0.171.0"
INSTALL_TIMEOUT = 600


@dataclass(frozen=True)
class AgentClis:
    """Where the installed CLIs are."""

    directory: Path

    @property
    def bin(self) -> Path:
        return self.directory / "node_modules" / ".bin"

    @property
    def claude(self) -> Path:
        return self.bin / "claude"

    @property
    def codex(self) -> Path:
        return self.bin / "codex"


def cache_dir() -> Path:
    base = os.environ.get("SUREHAND_AGENT_CLIS_CACHE") or str(
        Path.home() / ".cache" / "surehand-agent-clis"
    )
    return Path(base) / KEY


def install() -> AgentClis | str:
    """The CLIs, installed now if they are not yet; or why they cannot be."""
    clis = AgentClis(cache_dir())
    if clis.claude.exists() and clis.codex.exists():
        return clis
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed (Debian: apt-get install npm)"
    clis.directory.mkdir(parents=True, exist_ok=True)
    command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(clis.directory)]
    try:
        done = subprocess.run(
            [*command, *PACKAGES], capture_output=True, text=True, timeout=INSTALL_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"npm install {' '.join(PACKAGES)} did not finish: {error}"
    if done.returncode != 0 or not clis.claude.exists() or not clis.codex.exists():
        return f"npm install {' '.join(PACKAGES)} failed: {done.stderr.strip()[-500:]}"
    return clis


def require_clis() -> AgentClis:
    """The installed CLIs, or skip (fail in CI) with the reason (tests/skips.py's rule)."""
    from tests.skips import missing  # this module also runs without pytest, from .ci/run

    found = install()
    if isinstance(found, AgentClis):
        return found
    missing(f"the agent CLIs ({found})")


if __name__ == "__main__":  # .ci/run: install them before the tests
    result = install()
    print(result if isinstance(result, str) else f"agent CLIs in {result.bin}")
