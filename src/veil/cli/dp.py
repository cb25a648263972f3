"""``veil dp``: differentially private statistics of a column of a CSV file."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from veil._validation import check_bounds, check_choice, check_delta, check_epsilon, check_int
from veil.cli import dp_demo
from veil.cli._output import check_input_file, parse_list, print_json, print_mapping
from veil.dp import stats
from veil.dp.ledger import Ledger
from veil.dp.result import Result
from veil.errors import ConfigError, DataError

app = typer.Typer(help="Differential privacy.", no_args_is_help=True)

QUERIES = ("count", "sum", "mean", "variance", "histogram", "quantile")


def read_csv(path: Path, option: str = "FILE") -> pd.DataFrame:
    """A CSV file with its separator (, ; tab |) detected from its first lines; errors
    name it as ``option``."""
    check_input_file(path, option, text=True)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            sample = fh.read(65536)
        try:
            sep = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
        except csv.Error:
            sep = ","
        df = pd.read_csv(path, sep=sep, skipinitialspace=True)
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(f"{path} is not a readable CSV file: {exc}") from None
    if df.empty:
        raise DataError(f"{path} holds no data rows")
    return df


def _bounds(text: str | None, query: str) -> tuple[float, float]:
    if text is None:
        raise ConfigError(f"--bounds is required for --query {query}: declare the range as "
                          "LO,HI (bounds are never read from the data)")
    return check_bounds(tuple(parse_list(text, "--bounds")), "--bounds")


def run_query(column: pd.Series, query: str, *, epsilon: float, delta: float,
              bounds: str | None, bins: str | None, categories: str | None, q: float,
              ledger: Ledger) -> Result:
    """One statistic of one column, released through ``ledger``."""
    check_choice(query, "--query", QUERIES)
    common: dict[str, Any] = {"epsilon": epsilon, "ledger": ledger, "label": query}
    if query == "count":
        return stats.count(column, delta=delta, **common)
    if query == "histogram":
        if categories is not None:
            cats = parse_list(categories, "--categories", str)
            return stats.histogram(column.astype(str).str.strip(), categories=cats,
                                   delta=delta, **common)
        if bins is None:
            raise ConfigError("--query histogram needs --bins (edges A,B,C or a number of "
                              "equal-width bins over --bounds) or --categories")
        edges = parse_list(bins, "--bins")
        if len(edges) == 1:
            lo, hi = _bounds(bounds, query)
            k = check_int(int(edges[0]) if edges[0].is_integer() else edges[0], "--bins",
                          low=1)
            edges = [lo + (hi - lo) * i / k for i in range(k)] + [hi]
        return stats.histogram(column, edges, delta=delta, **common)
    if query == "quantile":
        if delta:
            raise ConfigError(f"--delta={delta!r} is not allowed with --query quantile: it is "
                              "pure epsilon-DP (the exponential mechanism)")
        return stats.quantile(column, q, bounds=_bounds(bounds, query), **common)
    function = {"sum": stats.sum, "mean": stats.mean, "variance": stats.variance}[query]
    return function(column, bounds=_bounds(bounds, query), delta=delta, **common)


@app.command("stats")
def stats_command(
    file: Annotated[Path, typer.Argument(help="A CSV file (separator detected).")],
    column: str = typer.Option(..., "--column", help="The column to query."),
    query: str = typer.Option("mean", "--query", help=f"One of {', '.join(QUERIES)}."),
    epsilon: float = typer.Option(..., "--epsilon", help="Privacy budget epsilon (> 0)."),
    delta: float = typer.Option(0.0, "--delta", help="delta in [0, 1): 0 uses Laplace "
                                "noise, > 0 Gaussian."),
    bounds: str = typer.Option(None, "--bounds", help="Declared range LO,HI (values outside "
                               "are clipped and counted)."),
    q: float = typer.Option(0.5, "--q", help="The quantile, for --query quantile."),
    bins: str = typer.Option(None, "--bins", help="Histogram edges A,B,C or a number of "
                             "equal-width bins over --bounds."),
    categories: str = typer.Option(None, "--categories", help="Declared categories A,B,C "
                                   "(categorical histogram)."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Release one differentially private statistic of a CSV column."""
    ledger = Ledger(check_epsilon(epsilon, "--epsilon"), check_delta(delta, "--delta"))
    df = read_csv(file)
    if column not in df.columns:
        raise DataError(f"--column={column!r} is not a column of {file}; columns: "
                        f"{', '.join(map(str, df.columns))}")
    result = run_query(df[column], query, epsilon=epsilon, delta=delta, bounds=bounds,
                       bins=bins, categories=categories, q=q, ledger=ledger)
    spent_eps, spent_delta = ledger.spent()
    out = {"file": str(file), "column": column, "query": query, "value": result.value,
           "epsilon": result.epsilon, "delta": result.delta, "clipped": result.clipped,
           "ledger_spent": {"epsilon": spent_eps, "delta": spent_delta},
           "mechanism": result.mechanism, **result.details}
    if json_:
        print_json(out)
    else:
        print_mapping({k: v for k, v in out.items() if k != "ledger_spent"},
                      title=f"veil dp stats: {query} of {column!r}")


app.command("demo")(dp_demo.demo)
