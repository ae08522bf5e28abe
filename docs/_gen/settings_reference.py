"""The settings reference, rendered from ``surehand.config.Settings`` (nothing hand-copied).

Every field becomes one entry: its environment variable, type, default, bounds and the
field's own description. The site builds it on every ``mkdocs build`` (``hooks.py``).
"""

from __future__ import annotations

import enum
import types
import typing
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from surehand.config import Settings

PREFIX = Settings.model_config.get("env_prefix", "SUREHAND_")
BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def env_name(field: str) -> str:
    return f"{PREFIX}{field.upper()}"


def type_text(annotation: Any) -> str:
    """``str``, ``int``, ``path or unset``, or the values a Literal allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = [type_text(arg) for arg in typing.get_args(annotation) if arg is not type(None)]
        return " or ".join(parts) + " or unset"
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def default_text(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def bounds_text(info: FieldInfo) -> str:
    found = []
    for item in info.metadata:
        for name, sign in BOUNDS:
            if getattr(item, name, None) is not None:
                found.append(f"{sign} {getattr(item, name)}")
    return ", ".join(found)


def entry(name: str, info: FieldInfo) -> str:
    """One setting: a heading that links can name, then its facts and description."""
    variable = env_name(name)
    facts = [f"type {type_text(info.annotation)}", f"default {default_text(info)}"]
    if bounds := bounds_text(info):
        facts.append(bounds)
    description = (info.description or "").strip()
    return f"### `{variable}` {{#{variable.lower()}}}\n\n{' · '.join(facts)}\n\n{description}\n"


def render() -> str:
    """The whole page."""
    fields = Settings.model_fields
    head = (
        "# Settings reference\n\n"
        "Generated from `surehand/config/` when the site is built: every setting surehand "
        f"reads, {len(fields)} in all, grouped by subsystem (store, agents, sandbox, sessions, "
        "unattended, doors) in the order their modules declare them. Each is the "
        f"environment variable `{PREFIX}<NAME>`; every CLI option names its variable in "
        "`--help`. What the settings mean together: [Configuration](../configuration.md).\n\n"
        "| variable | type | default |\n|---|---|---|\n"
    )
    index = "".join(
        f"| [`{env_name(n)}`](#{env_name(n).lower()}) | {type_text(i.annotation)} | "
        f"{default_text(i)} |\n"
        for n, i in fields.items()
    )
    return head + index + "\n" + "\n".join(entry(n, i) for n, i in fields.items())
