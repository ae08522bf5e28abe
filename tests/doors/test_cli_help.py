"""Every command's ``--help`` as a person reads it: each option described, nothing eaten by
rich markup (``[default 127.0.0.1]`` rendered as "Address to bind ."), each env var named."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from rich.text import Text
from typer.testing import CliRunner

from surehand.cli import app

WIDE = {"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
MANGLED = re.compile(r"\s[.,;:)]|\s{2}|^\s|\s$|\(\s*\)")


def leaves(command: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """(``"db upgrade"``, click command) for every command under the typer app."""
    command = command if command is not None else typer.main.get_command(app)
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield " ".join(path), command
        return
    for name, sub in subcommands.items():
        yield from leaves(sub, (*path, name))


def rendered_help(name: str) -> str:
    result = CliRunner().invoke(app, [*name.split(), "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


def _flat(text: str) -> str:
    return " ".join(text.split())


def _option_line(shown: str, opts: list[str]) -> str:
    names = "|".join(map(re.escape, opts))
    pattern = re.compile(rf"│\s+\*?\s*(?:-\w,\s+)?(?:{names})[\s/,]")  # "*": required
    lines = [line for line in shown.splitlines() if pattern.search(line)]
    assert lines, f"{opts} not in --help"
    return lines[0]


def _problems(text: str | None) -> list[str]:
    """What is wrong with one description: missing, eaten by markup, or mangled."""
    if not text or not text.strip():
        return ["no description"]
    plain = Text.from_markup(text).plain
    if plain != text:
        return [f"rich markup eats part of it: {text!r} shows as {plain!r}"]
    return [f"mangled: {text!r}"] if MANGLED.search(text) else []


COMMANDS = sorted(name for name, _ in leaves())


def test_the_walk_finds_every_command() -> None:
    expected = {"up", "api", "mcp", "flower", "worker", "beat", "submit", "tasks", "show"}
    assert expected | {"move", "report", "db upgrade", "fcop export"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_is_described_and_names_its_env_var(name: str) -> None:
    command = dict(leaves())[name]
    shown = rendered_help(name)
    problems = []
    for param in command.params:
        if param.name == "help":
            continue
        where = f"{name} {param.opts[0]}"
        problems += [f"{where}: {problem}" for problem in _problems(param.help)]
        if param.param_type_name != "option":
            continue
        if not param.envvar:
            problems.append(f"{where}: no env var")
        line = _option_line(shown, param.opts)
        if param.help and _flat(param.help) not in _flat(line):
            problems.append(f"{where}: rendered as {line.strip()!r}")
        if param.envvar and f"env var: {param.envvar}" not in line:
            problems.append(f"{where}: env var not shown in {line.strip()!r}")
    assert problems == []


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_description_renders_whole(name: str) -> None:
    description = dict(leaves())[name].help or ""
    assert description.strip(), f"{name} has no description"
    assert Text.from_markup(description).plain == description, "rich markup eats part of it"
    first = description.strip().split("\n\n")[0]
    assert _flat(first) in _flat(rendered_help(name))
