"""The ``surehand`` command line (typer + rich). Thin: every command calls the service layer."""

from __future__ import annotations

# The command modules register on import, and `surehand --help` lists the commands in the
# order they registered: keep this order (not the alphabet).
# isort: off
from surehand.cli import admin_commands, check_command
from surehand.cli import session_commands, case_commands, agent_commands
from surehand.cli import serve_commands, flower_command, stop_commands, task_commands

# isort: on
from surehand.cli.app import app

__all__ = [
    "admin_commands",
    "agent_commands",
    "app",
    "case_commands",
    "check_command",
    "flower_command",
    "main",
    "serve_commands",
    "session_commands",
    "stop_commands",
    "task_commands",
]


def main() -> None:
    app()
