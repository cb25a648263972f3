"""Shared output helpers for the CLI: rich tables on a terminal, or JSON with ``--json``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from veil._json import to_jsonable

console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    """Write ``data`` to stdout as JSON (no rich markup)."""
    print(json.dumps(to_jsonable(data), indent=2))


def _fmt(value: Any) -> str:
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    return str(value)


def print_table(rows: Iterable[Sequence[Any]], columns: Sequence[str], *,
                title: str | None = None) -> None:
    """A rich table with the given column headers."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_fmt(v) for v in row))
    console.print(table)


def print_mapping(data: Mapping[str, Any], *, title: str | None = None) -> None:
    """A two-column table of key/value pairs."""
    print_table(data.items(), ["", "value"], title=title)
