"""The ``surehand`` typer application; command modules register on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="surehand",
    help="surehand: a task queue for AI-agent work that creates each TASK once and takes it "
    "over only on evidence. Every option also reads the environment variable shown.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
db_app = typer.Typer(help="Database schema (migrations).", no_args_is_help=True)
fcop_app = typer.Typer(help="The FCoP workspace mirror.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(fcop_app, name="fcop")
