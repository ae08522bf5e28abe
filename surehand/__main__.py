"""``python -m surehand`` runs the CLI."""

from __future__ import annotations

from surehand.cli import main

main()
