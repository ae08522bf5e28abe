"""What a command agent's program finds in its environment: its session, and nothing else.

An agent program is untrusted (it reads text anyone may have written), so it never inherits the
worker's environment, which holds the store, broker and Redis URLs and every API token. It gets:

- its session: ``SUREHAND_TASK_ID``, ``SUREHAND_ATTEMPT``, ``SUREHAND_ATTEMPT_ID``,
  ``SUREHAND_ROLE``, ``SUREHAND_TENANT``, ``SUREHAND_TASK_FILE``, ``SUREHAND_SESSION_DIR`` and,
  with the session MCP server, ``SUREHAND_MCP_URL`` and ``SUREHAND_MCP_TOKEN`` (its own token,
  good for its own attempt's tools only);
- a home of its own (``HOME`` inside the session directory), ``PATH`` (with the directory of
  this surehand's ``surehand`` command first, so ``surehand effect`` is found), and the locale,
  ``TZ`` and ``TERM`` of the worker;
- the names an operator lists in ``SUREHAND_AGENT_ENV`` (e.g. ``ANTHROPIC_API_KEY``), and only
  those. A ``SUREHAND_*`` name there is a configuration error: no surehand secret is passed by
  name either;
- in the egress network mode, ``HTTPS_PROXY``/``HTTP_PROXY`` (both spellings) and ``NO_PROXY``
  naming its session's proxy (:mod:`surehand.agents.network`), over any the operator passed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from surehand.errors import ConfigError

PASSED = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM")
PASSED_PREFIXES = ("LC_",)
SESSION_NAMES = (
    "SUREHAND_TASK_ID",
    "SUREHAND_ATTEMPT",
    "SUREHAND_ATTEMPT_ID",
    "SUREHAND_ROLE",
    "SUREHAND_TENANT",
    "SUREHAND_TASK_FILE",
    "SUREHAND_SESSION_DIR",
    "SUREHAND_WORKSPACE",
    "SUREHAND_MCP_URL",
    "SUREHAND_MCP_TOKEN",
)
_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def operator_names(setting: str) -> list[str]:
    """The names ``SUREHAND_AGENT_ENV`` lists; ConfigError for a bad or surehand name."""
    names = [part.strip() for part in setting.split(",") if part.strip()]
    for name in names:
        if not _NAME.match(name):
            raise _bad(name, "is not an environment variable name")
        if name.upper().startswith("SUREHAND_"):
            raise _bad(
                name,
                "is surehand's own: an agent gets its session's variables and nothing else of "
                "surehand (its store, broker, Redis and tokens stay with the worker)",
            )
    return names


def _bad(name: str, why: str) -> ConfigError:
    return ConfigError(
        f"SUREHAND_AGENT_ENV names {name!r}, which {why}", setting="SUREHAND_AGENT_ENV"
    )


def received_names(setting: str, source: Mapping[str, str] | None = None) -> list[str]:
    """The names of the worker's environment an agent would receive (``surehand check``)."""
    env = os.environ if source is None else source
    inherited = [name for name in env if _inherited(name)]
    return sorted({*inherited, *(n for n in operator_names(setting) if n in env)})


def _inherited(name: str) -> bool:
    return name in PASSED or name.startswith(PASSED_PREFIXES)


def agent_environment(
    session: Mapping[str, str],
    *,
    home: Path,
    setting: str,
    source: Mapping[str, str] | None = None,
    program: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one session's program: ``session`` variables (only
    :data:`SESSION_NAMES`), a ``HOME`` of its own, what :func:`received_names` allows, and
    what a preset's CLI needs (``program``: Codex's ``CODEX_HOME``)."""
    env = os.environ if source is None else source
    unknown = set(session) - set(SESSION_NAMES)
    if unknown:
        raise ValueError(f"not session variables: {sorted(unknown)}")  # a programming error
    chosen = {name: env[name] for name in received_names(setting, env)}
    chosen["PATH"] = _path_with_surehand(chosen.get("PATH", DEFAULT_PATH))
    return {**chosen, **(program or {}), "HOME": str(home), **session}


def _path_with_surehand(path: str) -> str:
    """``path`` with the directory of this interpreter's ``surehand`` command first (a venv's
    ``bin``, which the worker's PATH may lack), so ``surehand effect`` runs in a session."""
    scripts = Path(sys.executable).parent
    if not (scripts / "surehand").exists():
        return path
    parts = [part for part in path.split(os.pathsep) if part and part != str(scripts)]
    return os.pathsep.join([str(scripts), *parts])
