"""``veil synth``: publish a table as differentially private synthetic data, and evaluate it.

    veil synth fit DATA.csv --schema schema.toml --epsilon 1 --delta 1e-9 --method aim \\
        --ledger budget.db [--budget-epsilon 4] --out synthetic.csv [--report DIR] [--force]
    veil synth evaluate DATA.csv SYNTHETIC.csv [--holdout HELD.csv] [--schema schema.toml] \\
        [--target salary-class] [--json]

The schema is a TOML file (:mod:`veil.synth.schema`), never read from the data. The fit is
charged to the ledger once, before the first measurement; everything wrong with the schema,
the data or the budget is refused before that charge. ``--out`` is never replaced without
``--force``. ``--report DIR`` writes ``DIR/report.html`` (:mod:`veil.synth.report`): the real
marginals beside the synthetic ones, NOT private (for the data steward), so it is kept apart
from ``--out``; a non-empty DIR needs ``--force``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from veil._io import atomic_write
from veil._validation import check_choice, check_int
from veil.cli._output import (
    check_input_file,
    check_out_dir,
    print_json,
    print_mapping,
    progress,
    say,
)
from veil.cli.anon import read_table
from veil.cli.dp import BudgetDelta, BudgetEpsilon, LedgerPath, open_ledger
from veil.errors import ConfigError, DataError
from veil.synth import METHODS, evaluate, load_schema
from veil.synth.base import MAX_ROWS
from veil.synth.report import NOT_PRIVATE, fit_report

app = typer.Typer(no_args_is_help=True,
                  help="DP synthetic data: `veil synth fit DATA.csv --schema S.toml ...`, "
                       "`veil synth evaluate DATA.csv SYNTHETIC.csv ...`.")


@app.command("fit")
def fit(
    data: Annotated[Path, typer.Argument(help="The table (CSV; separator detected).")],
    schema: Annotated[Path, typer.Option("--schema", help="The declared schema (TOML).")],
    out: Annotated[Path, typer.Option("--out", help="The synthetic table to write (CSV).")],
    epsilon: float = typer.Option(..., "--epsilon", help="Epsilon of the fit."),
    delta: float = typer.Option(..., "--delta", help="Delta of the fit (e.g. 1e-9)."),
    method: str = typer.Option("aim", "--method", help="aim, mst or independent."),
    ledger_path: LedgerPath = None,
    budget_epsilon: BudgetEpsilon = None,
    budget_delta: BudgetDelta = None,
    rows: int = typer.Option(None, "--rows", help="Rows to sample (default: the model's "
                             "noisy estimate of the table's size)."),
    report: Annotated[Path | None, typer.Option(
        "--report", help="A folder for report.html: real vs synthetic marginals, the "
                         "certificate, the workload error. " + NOT_PRIVATE)] = None,
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file (and "
                               "write into a non-empty --report folder)."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Fit a DP synthesizer to DATA.csv, charge the ledger once, write the synthetic table."""
    check_choice(method, "--method", sorted(METHODS))
    if rows is not None:
        check_int(rows, "--rows", low=1, high=MAX_ROWS)
    if out.exists() and not force:
        raise ConfigError(f"--out={str(out)!r} already exists: choose another --out, or pass "
                          "--force to replace it")
    if report is not None:
        check_out_dir(report, "--report", force=force)
        if out.resolve().is_relative_to(report.resolve()):
            raise ConfigError(f"--out={str(out)!r} is inside --report={str(report)!r}: the "
                              "report is not private, keep the release apart from it")
    if ledger_path is None:
        raise ConfigError("a release from the CLI is charged to a persistent ledger: pass "
                          "--ledger FILE (with --budget-epsilon E to create it)")
    declared = load_schema(schema)
    table, sep = read_table(check_input_file(data, "DATA"), None)
    METHODS[method](declared, epsilon=epsilon, delta=delta).cost()  # priced before a ledger
    ledger = open_ledger(ledger_path, budget_epsilon, budget_delta, delta)  # file is made
    with progress(f"synth {method}", total=1.0) as update:
        options: dict[str, Any] = {"epsilon": epsilon, "delta": delta}
        if method == "aim":
            options["progress"] = lambda share: update(done=share, what="rho used")
        synth = METHODS[method](declared, **options)
        synth.fit(table, ledger=ledger)
        update(done=1.0, what="fitted")
    synthetic = synth.sample(rows)
    atomic_write(out, synthetic.to_csv(index=False, sep=sep))
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        atomic_write(report / "report.html", fit_report(synth, table, synthetic))
    spent = ledger.spent()
    summary = {"method": method, "epsilon": epsilon, "delta": delta,
               "rho": synth.cost().rho, "rows": len(synthetic),
               "marginals_measured": len(synth.measurements_),
               "model_cells": synth.model_.tree.cells(), "out": str(out),
               "ledger": str(ledger_path), "ledger_spent_epsilon": spent[0],
               "ledger_delta": spent[1]}
    if report is not None:
        summary["report"] = str(report / "report.html")
    if json_:
        print_json(summary)
    else:
        print_mapping(summary, title="DP synthetic data")


@app.command("evaluate")
def evaluate_cmd(
    data: Annotated[Path, typer.Argument(help="The real table the synthesizer was fitted on.")],
    synthetic: Annotated[Path, typer.Argument(help="The synthetic table.")],
    holdout: Annotated[Path | None, typer.Option(
        "--holdout", help="Real rows not fitted on (ML efficacy, membership audit).")] = None,
    schema: Annotated[Path | None, typer.Option(
        "--schema", help="The declared schema (TOML).")] = None,
    target: str = typer.Option(None, "--target", help="Column to predict (ML efficacy)."),
    delta: float = typer.Option(1e-6, "--delta", help="Delta of the audit's epsilon bound."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Workload error (all 3-way marginals), ML efficacy, membership-inference audit."""
    real, _ = read_table(check_input_file(data, "DATA"), None)
    fake, _ = read_table(check_input_file(synthetic, "SYNTHETIC"), None)
    held = read_table(check_input_file(holdout, "--holdout"), None)[0] if holdout else None
    if target is not None and held is None:
        raise DataError("--target needs --holdout: the classifiers are tested on real rows "
                        "that were not fitted on")
    declared = load_schema(schema) if schema is not None else None
    result = evaluate(real, fake, holdout=held, schema=declared, target=target, delta=delta)
    if json_:
        print_json(result.to_dict())
        return
    say(f"workload error (mean L1 over {result.workload_size} marginals): "
        f"{result.workload_error:.4f}")
    if result.ml:
        print_mapping(result.ml, title="ML efficacy (tested on --holdout)")
    for name, found in result.attacks.items():
        print_mapping(found, title=f"membership inference: {name}")

