"""``veil demo``: the hybrid approach to private federated learning (Truex et al. 2019) end to
end -- ten parties, a 2048-bit threshold Paillier key, a decision tree on Nursery and logistic
regression on Adult, beside the no-privacy, SMC-only, central-DP and local-DP baselines."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from veil.cli._output import console, err_console, print_json, print_table
from veil.experiments.demo import KEY_BITS, run_demo

_LABELS = {"none": "no privacy", "smc": "SMC only", "central": "central DP",
           "hybrid": "hybrid", "local": "local DP"}


def _bytes(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def demo(json_: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
         quick: bool = typer.Option(False, "--quick", help="A shallow tree, 4 rounds and a "
                                    "512-bit test key: seconds, for tests (not secure)."),
         epsilon: float = typer.Option(1.0, help="Privacy budget of each learner."),
         ) -> None:
    """Hybrid private federated learning: 10 parties, Nursery tree and Adult logistic regression."""
    with Progress(TextColumn("[bold]demo"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("dealing a threshold key", total=None)
        report = run_demo(epsilon=epsilon, quick=quick, key_bits=512 if quick else KEY_BITS,
                          on_run=lambda done, total, what: progress.update(
                              task, completed=done, total=total, description=what))
    if json_:
        print_json(asdict(report))
        return
    why = ("the smallest size veil accepts outside tests (112-bit security, NIST SP 800-57)"
           if report.key_bits >= 2048 else "an insecure test key (--quick)")
    console.print(
        f"[bold]{report.parties} parties[/], trust t = {report.trust} honest parties: each adds "
        f"1/{report.trust} of the noise, and any t_bar = n - t + 1 = {report.threshold} of them "
        f"decrypt (the n - t = {report.parties - report.trust} that may collude cannot). "
        f"Threshold Paillier key: {report.key_bits} bits, {why}; dealt by a trusted dealer in "
        f"{report.keygen_seconds:.1f} s (two safe primes). Noise: {report.noise} shares; budget "
        f"epsilon = {report.epsilon:g}, delta = {report.delta:g} per learner, each run charged "
        "to its own Ledger.")
    for name in dict.fromkeys(r.task for r in report.runs):
        rows = [r for r in report.runs if r.task == name]
        print_table([(_LABELS[r.method], "" if r.trust is None else r.trust,
                      f"{r.accuracy:.4f}", f"{r.epsilon:.3f}" if r.delta or r.epsilon else "-",
                      f"{r.seconds:.1f} s", _bytes(r.bytes_up), _bytes(r.bytes_down),
                      r.queries) for r in rows],
                    ["method", "t", "test accuracy", "epsilon spent", "time", "bytes up",
                     "bytes down", "queries"],
                    title=f"{name}: {report.parties} parties")
    console.print("no privacy: exact sums in the clear; SMC only: encrypted sums, no noise; "
                  "central DP: the aggregator adds all the noise (trusted); local DP: each "
                  "party adds all of it; hybrid: encrypted, each party adds its 1/t share. "
                  "Encrypted runs send only ciphertexts and partial decryptions to the "
                  "aggregator, which decrypts nothing but the noisy sum of each query. "
                  "Accuracy against epsilon: veil experiment truex --help.")
