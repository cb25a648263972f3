"""``veil experiment``: reproductions of published comparisons."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veil.cli._output import check_out_dir, parse_list, print_json, print_table, progress, say
from veil.cli.demo import LEDGERS

app = typer.Typer(help="Reproduce published comparisons.", no_args_is_help=True)


@app.command("truex")
def truex(
    dataset: Annotated[str, typer.Option(help="nursery, adult or digits.")] = "nursery",
    model: Annotated[str, typer.Option(help="tree, svm, logreg or nn.")] = "tree",
    parties: Annotated[str, typer.Option(help="Party counts, e.g. 10,50.")] = "10,50",
    honest: Annotated[str, typer.Option(
        help="t, the fewest honest parties assumed (any threshold = n - t + 1 decrypt): "
        "integers, 'half' or 'n', e.g. 1,half,n.")] = "1,half,n",
    epsilon: Annotated[str, typer.Option(help="Privacy budgets, e.g. 0.1,0.5,1,2,5.")
                       ] = "0.1,0.5,1,2,5",
    repeats: Annotated[int, typer.Option(help="Repetitions per point (error bars).")] = 3,
    noise: Annotated[str | None, typer.Option(
        help="gaussian, laplace or skellam (default: the paper's choice for the model).")
    ] = None,
    delta: Annotated[float, typer.Option(help="delta of the budget (Gaussian, Skellam).")
                     ] = 1e-5,
    out: Annotated[Path, typer.Option(help="Output directory (new or empty).")
                   ] = Path("truex_results"),
    force: Annotated[bool, typer.Option(
        "--force", help="Write into a non-empty --out (never over its ledgers).")] = False,
    report: Annotated[bool, typer.Option(
        "--report", help="Persist every model's Ledger under <out>/ledgers (run.json points "
        "at them) and write the privacy report (report.json, report.html) into <out>/audit.")
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Truex et al. (AISec 2019): accuracy vs epsilon for no privacy, central DP, local DP
    and the hybrid at each trust level; writes CSVs, a PNG plot and run.json (the run
    directory `veil audit` reads), plus the ledgers and the privacy report with --report."""
    from veil.audit import write_run
    from veil.experiments import TruexConfig, plot, run_truex, summarize, truex_run, write_csv

    config = TruexConfig(dataset, model, parties=parse_list(parties, "--parties", int),
                         honest=parse_list(honest, "--honest", str),
                         epsilons=parse_list(epsilon, "--epsilon"), repeats=repeats,
                         noise=noise, delta=delta)
    check_out_dir(out, force=force, keep=LEDGERS)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"truex_{dataset}_{model}"
    with progress("truex", transient=json_) as update:
        # persisted ledgers cost an fsync per charge: only for the report
        ledgers = Path("ledgers") / stem.name if report else None
        rows = run_truex(config, ledgers=None if ledgers is None else out / ledgers,
                         on_progress=lambda done, total, what: update(done, total, what))
    summary = summarize(rows)
    write_csv(rows, f"{stem}.csv")
    write_csv(summary, f"{stem}_summary.csv")
    plot(summary, f"{stem}.png", title=f"Truex et al. comparison: {dataset}, {model} "
                                      f"({config.noise} noise, noise-only simulation)")
    run_json = write_run(out, truex_run(rows, config,
                                        ledgers=None if ledgers is None else ledgers.as_posix()))
    files = [f"{stem}.csv", f"{stem}_summary.csv", f"{stem}.png", str(run_json)]
    if report:
        from veil.audit import privacy_report

        json_path, html_path = privacy_report(out).write(out / "audit")
        files += [str(html_path), str(json_path)]
    if json_:
        print_json({"config": {"dataset": dataset, "model": model, "noise": config.noise,
                               "parties": config.parties, "honest": list(config.honest),
                               "epsilons": config.epsilons, "repeats": config.repeats,
                               "delta": config.delta},
                    "summary": summary, "files": files})
        return
    print_table([(s["parties"], s["method"], s["honest"], s["threshold"], s["epsilon"],
                  f"{s['accuracy_mean']:.4f}", f"{s['accuracy_std']:.4f}") for s in summary],
                ["parties", "method", "honest", "threshold", "epsilon", "accuracy", "sd"],
                title=f"veil experiment truex: {dataset}, {model}, {config.noise} noise, "
                      f"{config.repeats} repetitions")
    say(f"wrote {', '.join(files)} (noise-only simulation: the encrypted protocol sums the "
        "same integers; see benchmarks/RESULTS.md)")
