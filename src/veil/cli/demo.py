"""``veil demo``: the hybrid approach to private federated learning (Truex et al. 2019) end to
end -- ten parties, a 2048-bit threshold Paillier key, a decision tree on Nursery and logistic
regression on Adult, beside the no-privacy, SMC-only, central-DP and local-DP baselines; each
model audited, written as a run directory with its privacy report (``<out>/audit``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veil._validation import check_epsilon
from veil.audit.report import TWO_FIGURES, round_bound
from veil.cli._output import check_out_dir, next_free, print_json, print_table, progress, say
from veil.experiments.demo import KEY_BITS, METHOD_LABELS, run_demo

#: files of a run directory veil never replaces: the ledgers (budget already spent)
LEDGERS = ("**/*.sqlite", "**/*.sqlite-wal", "**/*.sqlite-shm")

#: confidence of each empirical lower bound in the report
CONFIDENCE = 0.95


def _bytes(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def demo(json_: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
         quick: bool = typer.Option(False, "--quick", help="A shallow tree, 4 rounds and a "
                                    "512-bit test key: seconds, for tests (not secure)."),
         epsilon: float = typer.Option(1.0, help="Privacy budget of each learner."),
         out: Annotated[Path | None, typer.Option(
             "--out", help="Run directory to write (run.json, ledgers, scores; the privacy "
             "report in <out>/audit); it must be new or empty. Default: the next free "
             "demo_results/run-N.")] = None,
         force: Annotated[bool, typer.Option(
             "--force", help="Write into a non-empty --out (never over its ledgers).")
         ] = False,
         seed: Annotated[int | None, typer.Option(
             "--seed", help="Seed for a reproducible run, the key included (tests only: "
             "not secure); default: secure randomness.")] = None,
         ) -> None:
    """Hybrid private federated learning: 10 parties, Nursery tree and Adult logistic regression;
    every model audited, with a privacy report (HTML with plots) in <out>/audit."""
    from veil.audit import privacy_report

    check_epsilon(epsilon, "--epsilon")
    out = check_out_dir(out, force=force, keep=LEDGERS) if out is not None else next_free(
        Path("demo_results") / "run")
    with progress("demo", transient=True) as update:
        update(what="dealing a threshold key")
        report = run_demo(epsilon=epsilon, quick=quick, key_bits=512 if quick else KEY_BITS,
                          out=out, rng=seed,
                          on_progress=lambda done, total, what: update(done, total, what))
        update(what="privacy report")
        audit = privacy_report(out, confidence=CONFIDENCE, rng=seed)
        json_path, html_path = audit.write(out / "audit")
    audits = {e["label"]: e for e in audit.data["runs"]}
    if json_:
        print_json({**report.to_dict(), "report": {"html": str(html_path),
                                                   "json": str(json_path)},
                    "audit": [_headline(e) for e in audits.values()]})
        return
    why = ("the smallest size veil accepts outside tests (112-bit security, NIST SP 800-57)"
           if report.key_bits >= 2048 else "an insecure test key (--quick)")
    say(f"{report.parties} parties, honest t = {report.honest}: each adds "
        f"1/{report.honest} of the noise, and any threshold = n - t + 1 = {report.threshold} of "
        f"them decrypt (the n - t = {report.parties - report.honest} that may collude cannot). "
        f"Threshold Paillier key: {report.key_bits} bits, {why}; dealt by a trusted dealer in "
        f"{report.keygen_seconds:.1f} s (two safe primes). Noise: {report.noise} shares; budget "
        f"epsilon = {report.epsilon:g}, delta = {report.delta:g} per learner, each run charged "
        "to its own Ledger.")
    for name in dict.fromkeys(r.task for r in report.runs):
        rows = [r for r in report.runs if r.task == name]
        print_table([(METHOD_LABELS[r.method], "" if r.trust is None else r.trust.honest,
                      "" if r.trust is None else r.trust.threshold, f"{r.accuracy:.4f}",
                      _up(r.epsilon) if r.delta or r.epsilon else "-",
                      f"{r.seconds:.1f} s", _bytes(r.bytes_up), _bytes(r.bytes_down),
                      r.queries) for r in rows],
                    ["method", "honest", "threshold", "test accuracy", "epsilon spent", "time",
                     "bytes up", "bytes down", "queries"],
                    title=f"{name}: {report.parties} parties")
    say("no privacy: exact sums in the clear; SMC only: encrypted sums, no noise; "
        "central DP: the aggregator adds all the noise (trusted); local DP: each "
        "party adds all of it; hybrid: encrypted, each party adds its 1/t share. "
        "Encrypted runs send only ciphertexts and partial decryptions to the "
        "aggregator, which decrypts nothing but the noisy sum of each query. "
        "Accuracy against epsilon: veil experiment truex --help.")
    rows = [_headline(audits[r.label]) for r in report.runs]
    print_table([(h["run"], _up(h["certified_epsilon"]), _down(h["empirical_epsilon"]),
        f"{h['auc']:.3f}", f"{h['tpr_at_fpr_0.01']:.3f}") for h in rows],
                ["model", "certified epsilon", f"empirical epsilon >= ({CONFIDENCE:g})",
                 "attack AUC", "TPR at 1% FPR"],
                title=f"privacy audit: loss attack on {report.audit_records} audit records "
                      "per task, each in or out of training by a fair coin")
    say("certified: the Ledger's spend (an upper bound on epsilon); empirical: the "
        "one-run lower bound (Steinke, Nasr & Jagielski 2023) from the attack, which "
        f"holds with probability {CONFIDENCE:g}. A lower bound far below the "
        "certified epsilon means this attack found little, not that the model is "
        f"more private than certified. {TWO_FIGURES}")
    say(f"privacy report: {html_path} ({json_path.name} beside it)")


def _headline(entry: dict) -> dict:
    """Certified epsilon, empirical lower bound and attack figures of one report entry."""
    cert, best = entry.get("certified"), entry.get("empirical_epsilon_best")
    attack = entry.get("attack", {})
    return {"run": entry["label"], "certified_epsilon": cert["epsilon"] if cert else None,
            "empirical_epsilon": best["epsilon"] if best else None,
            "auc": attack.get("auc"), "tpr_at_fpr_0.01": attack.get("tpr_at_fpr_0.01")}


def _up(value: float | None) -> str:
    """An upper bound, rounded up ('-': none certified)."""
    return "-" if value is None else round_bound(value, up=True)


def _down(value: float | None) -> str:
    """A lower bound, rounded down ('-': no audit could run)."""
    return "-" if value is None else round_bound(value, up=False)
