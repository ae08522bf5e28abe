"""Python processes surehand starts itself (the outbox publisher, Flower): what they import and
what they inherit.

``python -m module`` puts the working directory first on ``sys.path``: a ``pydantic_settings.py``
planted where ``surehand api`` was started ran in its publisher child, with the API's whole
environment. So every Python child here runs ``-I`` (isolated: no working or script directory on
``sys.path``, no ``PYTHON*`` variables, no user site-packages) and is handed, instead, the
import path of the process that starts it less its working directory (:func:`import_path`):
it imports what its parent could, never what happens to lie where it was started. Plain ``-I``
would break a surehand installed with ``pip install --user``, run from a checkout, or finding
its agents' modules through ``PYTHONPATH``; this keeps those working. The working directory
stays on the path only where it is surehand's own checkout or listed in ``PYTHONPATH`` (the
operator's explicit choice).

Its environment is :func:`environment`: surehand's settings less the doors' secrets (API and
metrics tokens), the database client's ``PG*`` variables, locale, ``PATH``, ``HOME`` and the
like, and what the caller names; nothing else of its parent's.

The agents' own processes (the trampoline, the portal, hooks) run ``-I -S`` scripts that import
no third-party code and get the session's environment (``surehand.agents.environment``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

# The surehand package's parent: where this surehand is imported from.
ROOT = Path(__file__).resolve().parent.parent
# Run by ``python -I -c``: set the parent's import path, then run the module as ``-m`` would.
BOOT = (
    "import json, runpy, sys; sys.path[:] = json.loads(sys.argv[1]); del sys.argv[:2]; "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)
PASSED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR")
PASSED_PREFIXES = ("LC_", "PG", "SSL_CERT_", "SUREHAND_")
DOOR_SECRETS = frozenset({"SUREHAND_API_TOKENS", "SUREHAND_METRICS_TOKEN"})


def python_module(module: str, *args: str) -> list[str]:
    """The command line of ``python -m module args`` run isolated, importing from
    :func:`import_path` (the interpreter is this one's)."""
    return [sys.executable, "-I", "-c", BOOT, json.dumps(import_path()), module, *args]


def import_path(cwd: Path | None = None) -> list[str]:
    """This process's ``sys.path`` less the working directory (``''``, ``.`` or its absolute
    path), unless it is where surehand is imported from or ``PYTHONPATH`` lists it."""
    here = (cwd or Path.cwd()).resolve()
    listed = {_resolved(part) for part in _pythonpath() if part}
    kept = []
    for entry in sys.path:
        where = _resolved(entry) if entry else here
        if where == here and where != ROOT and where not in listed:
            continue
        kept.append(str(where) if entry in ("", ".") else entry)
    return kept


def _pythonpath() -> list[str]:
    if sys.flags.ignore_environment:
        return []
    return os.environ.get("PYTHONPATH", "").split(os.pathsep)


def _resolved(entry: str) -> Path:
    try:
        return Path(entry).resolve()
    except (OSError, RuntimeError):
        return Path(entry)


def environment(
    *, prefixes: Iterable[str] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a child: :data:`PASSED` names and :data:`PASSED_PREFIXES` (and
    ``prefixes``) of this one's, less :data:`DOOR_SECRETS`, then ``extra`` on top."""
    wanted = (*PASSED_PREFIXES, *prefixes)
    chosen = {
        name: value
        for name, value in os.environ.items()
        if (name in PASSED or name.startswith(wanted)) and name not in DOOR_SECRETS
    }
    return {**chosen, **(extra or {})}
