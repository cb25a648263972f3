"""``veil budget``: inspect a persisted privacy ledger, and calibrate noise to a budget."""

from __future__ import annotations

import datetime
import time

import typer

from veil.cli._output import print_json, print_mapping, print_table, say
from veil.dp.accounting import DEFAULT_ACCOUNTANT, calibrate_noise, describe, epsilon_for
from veil.dp.ledger import Ledger

app = typer.Typer(help="Privacy budgets: ledgers and noise calibration.", no_args_is_help=True)

#: deltas at which `show` reports the spend (plus the ledger's own delta)
_DELTAS = (1e-3, 1e-5, 1e-7, 1e-9)


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")


@app.command()
def show(
    file: str = typer.Argument(..., help="A ledger file (Ledger(..., path=FILE))."),
    last: int = typer.Option(0, "--last", min=0, help="Show only the last N charges (0: all)."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Charges, spend at several deltas, and what is left of a ledger's budget."""
    ledger = Ledger.open(file, read_only=True)
    try:
        history = ledger.history()
        deltas = sorted({*_DELTAS, ledger.delta} - {0.0}, reverse=True)
        spent = {f"{d:g}": ledger.spent(d)[0] for d in [0.0, *deltas]}
        levels = [(name, node.epsilon, node.delta, node.spent()[0])
                  for name, node in ledger.children().items()]
        eps_spent = ledger.spent()[0]
        summary = {
            "file": file, "accountant": ledger.accountant,
            "budget_epsilon": ledger.epsilon, "budget_delta": ledger.delta,
            "charges": len(history), "spent_epsilon": eps_spent,
            "remaining_epsilon": ledger.remaining()[0],
        }
    finally:
        ledger.close()
    rows = [(c.index, _when(c.time), c.scope or "-", c.kind, c.label or "", describe(c.event),
             c.epsilon) for c in (history[-last:] if last else history)]
    if json_:
        print_json({**summary, "epsilon_at_delta": spent,
                    "children": [dict(zip(["name", "epsilon", "delta", "spent"], r))
                                 for r in levels],
                    "history": [dict(zip(["index", "time", "ledger", "kind", "label", "event",
                                          "epsilon_after"], r)) for r in rows]})
        return
    print_table(rows, ["#", "time", "ledger", "kind", "label", "event", "epsilon after"],
                title=f"charges ({len(rows)} of {len(history)})")
    print_table(spent.items(), ["delta", "epsilon spent"], title="spend by delta")
    if levels:
        print_table(levels, ["child", "epsilon", "delta", "spent"], title="child ledgers")
    print_mapping(summary, title="budget")


@app.command()
def calibrate(
    epsilon: float = typer.Option(..., "--epsilon", help="Target epsilon."),
    delta: float = typer.Option(..., "--delta", help="Target delta."),
    sample_rate: float = typer.Option(1.0, "--sample-rate", help="Batch sampling rate q."),
    steps: int = typer.Option(1, "--steps", help="Number of noisy steps."),
    accountant: str = typer.Option(DEFAULT_ACCOUNTANT, "--accountant", help="pld or rdp."),
    sampling: str = typer.Option("poisson", "--sampling",
                                 help="poisson, or without_replacement (fixed-size batches)."),
    dataset_size: int = typer.Option(None, "--dataset-size",
                                     help="Records (needed for without_replacement)."),
    json_: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """The smallest Gaussian noise multiplier meeting (epsilon, delta) over the steps."""
    start = time.perf_counter()
    sigma = calibrate_noise(epsilon, delta, sample_rate, steps, accountant=accountant,
                            sampling=sampling, dataset_size=dataset_size)
    seconds = time.perf_counter() - start
    achieved = epsilon_for(sigma, delta, sample_rate, steps, accountant=accountant,
                           sampling=sampling, dataset_size=dataset_size)
    result = {"noise_multiplier": sigma, "epsilon": achieved, "target_epsilon": epsilon,
              "delta": delta, "sample_rate": sample_rate, "steps": steps,
              "accountant": accountant, "sampling": sampling, "seconds": seconds}
    if json_:
        print_json(result)
    else:
        print_mapping(result, title="noise calibration")
        say(f"sigma = {sigma:.6g} gives epsilon = {achieved:.6g} <= {epsilon:g} "
            f"at delta = {delta:g} ({accountant}, certified)")
