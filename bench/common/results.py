"""Where the benchmarks save what they measured: ``bench/results/<name>-<UTC>.json``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent.parent / "results"


def utc_stamp() -> str:
    """Now, as the results files name it (``20261206T112233Z``)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def save(name: str, document: Any, stamp: str | None = None, *, sort_keys: bool = False) -> Path:
    """Write ``document`` to ``bench/results/<name>-<stamp>.json`` (indented, one final newline)
    and say so in the words ``bench/scale/http_ratio.py`` reads back: ``saved bench/results/…``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{stamp or utc_stamp()}.json"
    text = json.dumps(document, indent=2, sort_keys=sort_keys)
    path.write_text(text + "\n", encoding="utf-8")
    print(f"saved bench/results/{path.name}")
    return path


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    """Print ``rows`` (dicts alike) as one rich table, a column per key of the first."""
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    Console().print(table)
