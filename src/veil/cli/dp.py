"""``veil dp``: differentially private statistics of a CSV column (``stats``) and group-by
queries per privacy unit (``query``), charged to a persistent ledger."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from veil._validation import (
    check_bounds,
    check_choice,
    check_delta,
    check_epsilon,
    check_int,
    check_probability,
)
from veil.cli import dp_demo
from veil.cli._output import check_input_file, parse_list, print_json, print_mapping, print_table
from veil.dp import stats
from veil.dp.accounting import DEFAULT_ACCOUNTANT
from veil.dp.ledger import Ledger
from veil.dp.result import Result
from veil.errors import ConfigError, DataError

app = typer.Typer(help="Differential privacy.", no_args_is_help=True)

QUERIES = ("count", "sum", "mean", "variance", "histogram", "quantile")


def csv_separator(path: Path, option: str = "FILE") -> str:
    """The separator (, ; tab |) of a CSV file, detected from its first lines; errors
    name the file as ``option``."""
    check_input_file(path, option, text=True)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            sample = fh.read(65536)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not a readable CSV file: {exc}") from None
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def read_csv(path: Path, option: str = "FILE") -> pd.DataFrame:
    """A CSV file with its separator (, ; tab |) detected from its first lines; errors
    name it as ``option``."""
    sep = csv_separator(path, option)
    try:
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


LedgerPath = Annotated[Path | None, typer.Option(
    "--ledger", help="A persistent ledger file (SQLite) to charge; created with "
    "--budget-epsilon when absent.")]
BudgetEpsilon = Annotated[float | None, typer.Option(
    "--budget-epsilon", help="Total epsilon of a new --ledger file.")]
BudgetDelta = Annotated[float | None, typer.Option(
    "--budget-delta", help="Total delta of a new --ledger file (default: --delta).")]


def run_query(column: pd.Series, query: str, *, epsilon: float, delta: float,
              bounds: str | None, bins: str | None, categories: str | None, q: float | None,
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
            edges = [lo + (hi - lo) * (i / k) for i in range(k)] + [hi]
        return stats.histogram(column, edges, delta=delta, **common)
    if query == "quantile":
        if delta:
            raise ConfigError(f"--delta={delta!r} is not allowed with --query quantile: it is "
                              "pure epsilon-DP (the exponential mechanism)")
        return stats.quantile(column, 0.5 if q is None else check_probability(q, "--q"),
                              bounds=_bounds(bounds, query), **common)
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
    q: float = typer.Option(None, "--q", help="The quantile in [0, 1], for --query quantile "
                            "(default 0.5)."),
    bins: str = typer.Option(None, "--bins", help="Histogram edges A,B,C or a number of "
                             "equal-width bins over --bounds."),
    categories: str = typer.Option(None, "--categories", help="Declared categories A,B,C "
                                   "(categorical histogram)."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ledger_path: LedgerPath = None,
    budget_epsilon: BudgetEpsilon = None,
    budget_delta: BudgetDelta = None,
) -> None:
    """Release one differentially private statistic of a CSV column.

    With --ledger FILE the release is charged to that persistent ledger (refused when it
    does not fit); without it, to a one-off budget of exactly --epsilon, --delta.
    """
    epsilon, delta = check_epsilon(epsilon, "--epsilon"), check_delta(delta, "--delta")
    check_choice(query, "--query", QUERIES)
    if q is not None and query != "quantile":
        raise ConfigError(f"--q={q!r} is not allowed with --query {query}: it is the quantile "
                          "of --query quantile")
    check_budget_options(ledger_path, budget_epsilon, budget_delta)
    ledger = (open_ledger(ledger_path, budget_epsilon, budget_delta, delta)
              if ledger_path is not None else Ledger(epsilon, delta))
    df = read_csv(file)
    if column not in df.columns:
        raise DataError(f"--column={column!r} is not a column of {file}; columns: "
                        f"{', '.join(map(str, df.columns))}")
    result = run_query(df[column], query, epsilon=epsilon, delta=delta, bounds=bounds,
                       bins=bins, categories=categories, q=q, ledger=ledger)
    out = {"file": str(file), "column": column, "query": query, "value": result.value,
           "epsilon": result.epsilon, "delta": result.delta, "clipped": result.clipped,
           "ledger_spent": ledger.spent()._asdict(),
           "mechanism": result.mechanism, **result.details}
    if json_:
        print_json(out)
    else:
        print_mapping({k: v for k, v in out.items() if k != "ledger_spent"},
                      title=f"veil dp stats: {query} of {column!r}")


def open_ledger(path: Path, budget_epsilon: float | None, budget_delta: float | None,
                delta: float) -> Ledger:
    """The ledger file at ``path``: opened with its stored budget, or created with
    ``--budget-epsilon`` (and ``--budget-delta``, default ``delta``) when absent."""
    if path.exists():
        for option, value in (("--budget-epsilon", budget_epsilon),
                              ("--budget-delta", budget_delta)):
            if value is not None:
                raise ConfigError(f"{option} is not allowed: {path} already holds a ledger "
                                  "with its own budget (see veil budget show)")
        return Ledger.open(path)
    if budget_epsilon is None:
        raise ConfigError(f"--ledger={str(path)!r} does not exist: create it by giving its "
                          "total budget with --budget-epsilon E [--budget-delta D]")
    return Ledger(check_epsilon(budget_epsilon, "--budget-epsilon"),
                  check_delta(delta if budget_delta is None else budget_delta,
                              "--budget-delta" if budget_delta is not None else "--delta"),
                  path=path)


def check_budget_options(ledger_path: Path | None, budget_epsilon: float | None,
                         budget_delta: float | None) -> None:
    """--budget-epsilon and --budget-delta create a --ledger file: without one they are
    refused, never ignored."""
    for option, value in (("--budget-epsilon", budget_epsilon),
                          ("--budget-delta", budget_delta)):
        if value is not None and ledger_path is None:
            raise ConfigError(f"{option} is not allowed without --ledger: it is the total "
                              "budget of a new ledger file (--ledger FILE)")


def _typed_keys(text: str, columns: list[str], frame: Any) -> list[Any]:
    """Declared keys ``A,B,C`` (``A|x,B|y`` for several columns), each part converted to
    its column's type when the column is numeric."""
    keys = []
    for item in (k.strip() for k in text.split(",") if k.strip()):
        parts = [p.strip() for p in item.split("|")]
        if len(parts) != len(columns):
            raise ConfigError(f"--keys item {item!r} is not allowed: give {len(columns)} "
                              f"value(s) joined by '|' for --group-by {', '.join(columns)}")
        typed = []
        for part, col in zip(parts, columns):
            kind = frame[col].dtype.kind if frame is not None else "O"
            try:
                typed.append(int(part) if kind in "iu" else float(part) if kind == "f"
                             else part)
            except ValueError:
                raise ConfigError(f"--keys value {part!r} is not allowed: column {col!r} is "
                                  "numeric") from None
        keys.append(tuple(typed) if len(typed) > 1 else typed[0])
    return keys


def _spark_table(file: Path) -> Any:
    from veil.dp.query.spark import session

    return session("local[*]", "veil dp query").read.csv(
        str(file), header=True, inferSchema=True, sep=csv_separator(file),
        ignoreLeadingWhiteSpace=True)


@app.command("query")
def query_command(
    file: Annotated[Path, typer.Argument(help="A CSV file (separator detected).")],
    agg: Annotated[list[str], typer.Option(
        "--agg", help="An aggregate: count, sum(COL,LO,HI), mean(COL,LO,HI), "
        "variance(COL,LO,HI), quantile(COL,Q,LO,HI), histogram(COL,E0,E1,..) (repeat for "
        "several).")],
    privacy_unit: str = typer.Option(..., "--privacy-unit", help="The column identifying a "
                                     "person (all their rows are protected together)."),
    epsilon: float = typer.Option(..., "--epsilon", help="Privacy budget of the query."),
    delta: float = typer.Option(0.0, "--delta", help="delta of the query (> 0 needed to "
                                "select groups when --keys is not given)."),
    max_groups: int = typer.Option(1, "--max-groups", help="Groups one unit may add to."),
    max_rows: int = typer.Option(1, "--max-rows", help="Rows one unit may add per group."),
    keys: str = typer.Option(None, "--keys", help="Declared public group keys A,B,C "
                             "(A|x,B|y for several --group-by); else DP partition selection."),
    noise: str = typer.Option(None, "--noise", help="laplace or gaussian (default: "
                              "laplace when --delta is 0, else gaussian)."),
    backend: str = typer.Option("pandas", "--backend", help="pandas (one machine) or spark."),
    ledger_path: LedgerPath = None,
    budget_epsilon: BudgetEpsilon = None,
    budget_delta: BudgetDelta = None,
    group_by: Annotated[list[str] | None, typer.Option(
        "--group-by", help="A group key column (repeat for several).")] = None,
    one_off: bool = typer.Option(False, "--one-off", help="Charge a fresh budget of exactly "
                                 "--epsilon, --delta instead of a ledger file."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the noise and the cost; "
                                 "read no data, charge nothing."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """A differentially private group-by query per privacy unit, charged to a ledger."""
    from veil.dp.query import Query
    from veil.dp.query.query import MAX_CONTRIBUTION

    check_choice(backend, "--backend", ("pandas", "spark"))
    epsilon, delta = check_epsilon(epsilon, "--epsilon"), check_delta(delta, "--delta")
    check_int(max_groups, "--max-groups", low=1, high=MAX_CONTRIBUTION)
    check_int(max_rows, "--max-rows", low=1, high=MAX_CONTRIBUTION)
    check_budget_options(ledger_path, budget_epsilon, budget_delta)
    group_by = group_by or []
    query = Query(privacy_unit, max_groups=max_groups, max_rows=max_rows).agg(*agg)
    frame = read_csv(file) if keys is not None and not dry_run else None
    if group_by:
        declared = _typed_keys(keys, list(group_by), frame) if keys is not None else None
        query = query.group_by(*group_by, keys=declared)
    ledger = None
    if ledger_path is not None:
        ledger = open_ledger(ledger_path, budget_epsilon, budget_delta, delta)
    elif not (one_off or dry_run):
        raise ConfigError("a release from the CLI is charged to a persistent ledger: pass "
                          "--ledger FILE (or --one-off for a fresh budget of exactly this "
                          "query, or --dry-run to see its cost)")
    plan = query.plan(epsilon, delta, noise=noise,
                      accountant=ledger.accountant if ledger is not None else DEFAULT_ACCOUNTANT)
    out: dict[str, Any] = {"file": str(file), "privacy_unit": privacy_unit,
                           "group_by": list(group_by), "plan": plan.summary()}
    if dry_run:
        if ledger is not None:
            out["ledger"] = {"path": str(ledger_path), "spent_epsilon": ledger.spent()[0],
                             "epsilon_after": ledger.would_spend(plan.event, delta=delta or None),
                             "budget_epsilon": ledger.epsilon, "fits": ledger.fits(
                                 plan.event, delta=delta or None)}
        _show_query(out, json_)
        return
    data = _spark_table(file) if backend == "spark" else (
        frame if frame is not None else read_csv(file))
    result = query.run(data, epsilon=epsilon, delta=delta, ledger=ledger, noise=noise)
    table = result.table.reset_index()
    out.update({"backend": backend, "groups_released": len(table),
                "ledger_spent": result.ledger.spent()._asdict(),
                "table": table.to_dict(orient="records"),
                "diagnostics": result.diagnostics})
    _show_query(out, json_, table)


def _show_query(out: dict[str, Any], json_: bool, table: pd.DataFrame | None = None) -> None:
    if json_:
        print_json(out)
        return
    plan = out["plan"]
    print_table([(p["part"], p["noise"], p.get("std", p.get("epsilon_per_group")))
                 for p in plan["parts"]], ["part", "noise", "std or epsilon per group"],
                title=f"plan: epsilon={plan['epsilon']:g} (certified "
                      f"{plan['certified_epsilon']:.6g}), delta={plan['delta']:g}")
    summary = {k: v for k, v in out.items() if k not in ("plan", "table", "diagnostics")}
    if plan["partition_selection"]:
        summary["threshold (noisy count)"] = plan["partition_selection"]["threshold"]
    print_mapping(summary, title="veil dp query")
    if table is not None:
        print_table(table.itertuples(index=False), [str(c) for c in table.columns],
                    title=f"released groups ({len(table)})")


app.command("demo")(dp_demo.demo)
