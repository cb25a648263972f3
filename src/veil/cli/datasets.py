"""``veil datasets``: what data veil can load here."""

from __future__ import annotations

import typer

from veil.cli._output import print_json, print_table
from veil.datasets import CATALOG

app = typer.Typer(help="Data sets veil can load.", no_args_is_help=True)


@app.command("list")
def list_(json_: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")):
    """List the data sets and whether each is available on this machine."""
    rows = [(d.name, d.rows or "any", "yes" if d.available() else "download", d.description)
            for d in CATALOG]
    if json_:
        print_json([dict(zip(["name", "rows", "available", "description"], r)) for r in rows])
    else:
        print_table(rows, ["name", "rows", "available", "description"], title="veil data sets")
