"""The CLI reference, rendered from the ``surehand`` command tree (typer's click commands).

Every command with its help text, arguments and options, and the environment variable each
option also reads. ``hooks.py`` renders it on every ``mkdocs build``.
"""

from __future__ import annotations

from typing import Any

import typer

from surehand.cli import app


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(param: Any) -> str:
    if param.default is None or param.default == () or param.param_type_name == "argument":
        return ""
    if callable(param.default):
        return ""
    if param.default == "":
        return "empty"
    if isinstance(param.default, bool):
        return f"`{str(param.default).lower()}`"
    return f"`{param.default}`"


def _param_row(param: Any) -> str:
    names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
    envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or [])
    help_text = getattr(param, "help", "") or ""
    required = "yes" if param.required else ""
    env = f"`{envvar}`" if envvar else ""
    return f"| {names} | {required} | {_default(param)} | {env} | {_cell(help_text)} |"


def _command(path: str, command: Any) -> str:
    params = [p for p in command.params if not getattr(p, "hidden", False) and p.name != "help"]
    rows = "\n".join(_param_row(p) for p in params)
    table = (
        "| argument or option | required | default | environment | description |\n"
        "|---|---|---|---|---|\n" + rows + "\n"
        if params
        else ""
    )
    help_text = (command.help or "").strip()
    return f"## `{path}`\n\n{help_text}\n\n{table}"


def _walk(path: str, command: Any) -> list[tuple[str, Any]]:
    """Every leaf command under ``command`` (groups load their commands lazily: ask them)."""
    if hasattr(command, "list_commands"):  # typer's group (its own vendored click's)
        context = command.context_class(command, info_name=path)
        found: list[tuple[str, Any]] = []
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            if sub is not None and not sub.hidden:
                found += _walk(f"{path} {name}", sub)
        return found
    return [(path, command)]


def render() -> str:
    root: Any = typer.main.get_command(app)
    commands = _walk("surehand", root)
    head = (
        "# CLI reference\n\n"
        "Generated from the `surehand` command tree when the site is built: every command, "
        f"{len(commands)} in all, with its arguments and options and the environment variable "
        "each option also reads (the same text as `surehand COMMAND --help`). How the CLI fits "
        "with the other doors: [HTTP, MCP, CLI and Python](../interfaces.md).\n\n"
    )
    return head + "\n".join(_command(path, command) for path, command in commands)
