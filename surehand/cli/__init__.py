"""The ``surehand`` command line (typer + rich). Thin: every command calls the service layer."""

from __future__ import annotations

from surehand.cli import (
    admin_commands,
    check_command,
    serve_commands,
    session_commands,
    stop_commands,
    task_commands,
)
from surehand.cli.app import app

__all__ = [
    "admin_commands",
    "app",
    "check_command",
    "main",
    "serve_commands",
    "session_commands",
    "stop_commands",
    "task_commands",
]


def main() -> None:
    app()
