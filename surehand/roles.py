"""Role codes: the one rule that write_task, every door, the queue and the CLI apply.

A role code is ``[A-Z][A-Z0-9_]*`` with optional hyphenated parts (``LEAD-QA``), at most 32
characters (the width of the store's sender and recipient columns). Hyphens are accepted
everywhere, not refused at write_task: FCoP, which TASKs follow, allows them
(``reference/fcop.md``), write_task has always accepted them so stored TASKs carry them, and a
queue named ``surehand.LEAD-QA`` is legal for Redis and kombu. Refusing them now would strand
those stored TASKs instead of running them.
"""

from __future__ import annotations

import re

from surehand.errors import ConfigError
from surehand.model import SYSTEM

_ROLE_BODY = r"[A-Z][A-Z0-9_]*(-[A-Z0-9_]+)*"
# Anchored with \A...\Z, not ^...$: ``$`` also matches before a trailing newline, which let
# "DEV\n" through ``.match``.
ROLE_RE = re.compile(rf"\A{_ROLE_BODY}\Z")
ROLE_PATTERN = f"^{_ROLE_BODY}$"  # the same rule as a JSON Schema / OpenAPI pattern
MAX_ROLE = 32
ROLE_RULE = f"[A-Z][A-Z0-9_]* with optional -PART suffixes, at most {MAX_ROLE} characters"


def role_problem(value: object) -> str | None:
    """Why ``value`` is not a role code a TASK may name, or None when it is one."""
    if not isinstance(value, str) or len(value) > MAX_ROLE or not ROLE_RE.match(value):
        return f"must be a role code like DEV, PM or LEAD-QA ({ROLE_RULE})"
    if value == SYSTEM:
        return "SYSTEM is reserved for the runtime"
    return None


def check_role(value: str) -> str:
    """``value`` if it is a role code; raises ValueError saying why not (pydantic-friendly)."""
    problem = role_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def per_role(text: str, setting: str) -> tuple[str | None, dict[str, str]]:
    """A setting written as a comma list of ``[ROLE=]VALUE`` (``setting``: its env var's
    name): the value without a role (the default, None if absent) and each role's own.
    ConfigError for an entry given twice."""
    default: str | None = None
    by_role: dict[str, str] = {}
    for entry in (part.strip() for part in text.split(",") if part.strip()):
        head, sep, rest = entry.partition("=")
        role = head.strip() if sep and ROLE_RE.match(head.strip()) else ""
        value = rest.strip() if role else entry
        if (role in by_role) if role else (default is not None):
            given = role or "the default"
            raise ConfigError(f"{setting}: {given} is given twice", setting=setting)
        if role:
            by_role[role] = value
        else:
            default = value
    return default, by_role
