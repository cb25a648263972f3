"""``veil audit``: the privacy report of a training run, or of a saved model.

``veil audit RUN_DIR`` reads a run directory (format in :mod:`veil.audit.rundir`) and writes
``report.json`` and ``report.html`` (into ``RUN_DIR/audit`` unless ``--out`` says otherwise).

``veil audit conformance`` runs the privacy conformance suite (:mod:`veil.audit.conformance`):
every registered release path against its neighbouring inputs; a table of path, neighbour
relation, certified epsilon, empirical lower bound and verdict (``--json``; ``--deep`` for
8x more trials); the exit code is 1 when any path fails.

``veil audit --model MODEL --members TRAIN.npz --nonmembers HOLDOUT.npz`` attacks a fitted
classifier (anything with ``predict_proba``) on records it was / was not trained on (``.npz``
files holding arrays ``X`` and ``y``) and reports the same way. MODEL is a veil model file
(:mod:`veil.learn.model_format`: no code runs on loading; its epsilon and ledger are used when
``--epsilon``/``--ledger`` are not given), or a pickle you trust.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from veil.cli._groups import DefaultGroup
from veil.cli._output import (
    check_input_file,
    check_out_dir,
    print_json,
    print_table,
    progress,
    say,
)
from veil.errors import ConfigError, DataError

ATTACK_HELP = "loss | confidence | shadow | lira | lira-offline"
#: the most shadow models --n-shadow may ask for (each one is a model trained here)
MAX_SHADOW = 10_000


def _load_xy(path: Path, option: str) -> tuple[np.ndarray, np.ndarray]:
    from veil._arrays import read_arrays

    check_input_file(path, option)
    arrays = read_arrays(path, what=f"{option}: an .npz file of arrays X and y",
                         names=("X", "y"))
    return arrays["X"], arrays["y"]


def _load_model(path: Path):
    """(model, metadata) from a veil model file, else (unpickled model, {})."""
    import zipfile

    check_input_file(path, "--model")
    if zipfile.is_zipfile(path):
        from veil.cli.predict import load_model_file

        try:
            loaded = load_model_file(path)
        except DataError as exc:
            raise DataError(f"--model: {exc}") from None
        return loaded.model, loaded.metadata
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh), {}  # noqa: S301 - documented: only models you trust
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise DataError(f"--model {path}: cannot unpickle a model ({exc})") from None


def _model_run(model_path, members, nonmembers, population, attack, n_shadow, ledger,
               epsilon, delta, seed):
    from veil.audit import membership_inference
    from veil.audit.rundir import Run, RunRecord

    if members is None or nonmembers is None:
        raise ConfigError("--model needs --members and --nonmembers (.npz files with X and y)")
    model, metadata = _load_model(model_path)
    if epsilon is None and metadata.get("epsilon") is not None and ledger is None:
        epsilon, delta = metadata["epsilon"], metadata.get("delta", delta)
    Xi, yi = _load_xy(members, "--members")
    Xo, yo = _load_xy(nonmembers, "--nonmembers")
    pop = _load_xy(population, "--population") if population is not None else None
    result = membership_inference(model, (Xi, yi), (Xo, yo), attack=attack, population=pop,
                                  n_shadow=n_shadow, rng=seed)
    accuracy = None
    if hasattr(model, "predict"):
        accuracy = float(np.mean(np.asarray(model.predict(Xo)) == yo))
    record = RunRecord(label=f"{model_path.stem} ({attack})", epsilon=epsilon, delta=delta,
                       ledger=str(ledger.resolve()) if ledger else None, accuracy=accuracy,
                       arrays={"member_scores": result.member_scores,
                               "nonmember_scores": result.nonmember_scores})
    return Run(name=str(model_path.name), kind="other", records=[record])


app = typer.Typer(cls=DefaultGroup, no_args_is_help=False,
                  help="Audit a training run (RUN_DIR) or a saved model (--model): certified "
                       "epsilon, empirical lower bounds, membership attack, mutual "
                       "information; or `veil audit conformance`, the privacy conformance "
                       "suite.")


@app.command("conformance")
def conformance(
    deep: Annotated[bool, typer.Option(
        "--deep", help="8x more trials per neighbouring pair.")] = False,
    confidence: Annotated[float, typer.Option(
        "--confidence", help="Confidence of each path's bound (Bonferroni over its "
        "pairs).")] = 0.95,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Seed the releases: a reproducible simulation (default: the "
        "CSPRNG).")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    only: Annotated[str | None, typer.Option(
        "--only", help="Only the paths whose name contains this (any case).")] = None,
) -> None:
    """Test every registered DP release path black-box against its neighbouring inputs
    (veil.audit.conformance): path, relation, certified epsilon, lower bound, verdict; exit
    status 1 when a path fails."""
    import veil.synth  # noqa: F401 (registers its cases: it sits above veil.audit)
    from veil.audit import conformance as cf

    chosen = [c for c in cf.cases() if only is None or only.lower() in c.name.lower()]
    if not chosen:
        raise ConfigError(f"--only={only!r} matches no registered release path")
    verdicts = []
    with progress("conformance", total=len(chosen)) as update:
        for i, case in enumerate(chosen):
            update(i, what=case.name)
            verdicts.append(cf.audit(case, deep=deep, confidence=confidence, rng=seed))
        update(len(chosen))
    if json_:
        print_json({"confidence": confidence, "deep": deep,
                    "paths": [v.to_dict() for v in verdicts]})
    else:
        rows = [(v.name, v.relation, f"{v.epsilon:.4g}",
                 "-" if v.skipped else f"{v.lower_bound:.3f}",
                 v.verdict if not v.skipped else f"skipped ({v.skipped})") for v in verdicts]
        print_table(rows, ["path", "neighbours", "certified eps",
                           f"eps >= ({confidence:g})", "verdict"],
                    title="veil privacy conformance")
    if not all(v.passed for v in verdicts):
        raise typer.Exit(1)


@app.command("run")
def audit(
    run_dir: Annotated[Path | None, typer.Argument(
        help="A run directory holding run.json.")]
    = None,
    model: Annotated[Path | None, typer.Option(
        "--model", help="A fitted classifier with predict_proba: a veil model file "
        "(model.npz), or a pickle (unpickling runs code: only files you trust).")] = None,
    members: Annotated[Path | None, typer.Option(
        "--members", help=".npz (X, y): the training records.")] = None,
    nonmembers: Annotated[Path | None, typer.Option(
        "--nonmembers", help=".npz (X, y): records not trained on.")] = None,
    population: Annotated[Path | None, typer.Option(
        "--population", help=".npz (X, y): more records from the same distribution, for "
        "shadow models.")] = None,
    attack: Annotated[str, typer.Option("--attack", help=ATTACK_HELP)] = "loss",
    n_shadow: Annotated[int, typer.Option("--n-shadow", help="Shadow models (shadow, LiRA).")]
    = 16,
    ledger: Annotated[Path | None, typer.Option(
        "--ledger", help="The ledger file of the model's training.")] = None,
    epsilon: Annotated[float | None, typer.Option(
        "--epsilon", help="Declared epsilon (when there is no ledger).")] = None,
    delta: Annotated[float | None, typer.Option("--delta", help="Declared delta.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Folder for report.json and report.html.")] = None,
    confidence: Annotated[float, typer.Option(
        "--confidence", help="Confidence of each empirical bound.")] = 0.95,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Seed for reproducible splits and bootstraps (default: secure "
        "randomness).")] = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Write into a folder that already holds a report.")] = False,
) -> None:
    """Audit a training run (RUN_DIR) or a saved model (--model): certified epsilon, empirical
    lower bounds, membership attack, mutual information; writes report.json + report.html."""
    from veil._validation import check_delta, check_int, check_positive
    from veil.audit import privacy_report
    from veil.audit.report import TWO_FIGURES, headline, round_bound

    if (run_dir is None) == (model is None):
        raise ConfigError("give either RUN_DIR or --model (not both, not neither)")
    check_int(n_shadow, "--n-shadow", low=1, high=MAX_SHADOW)
    if epsilon is not None:
        check_positive(epsilon, "--epsilon", allow_zero=True)
    if delta is not None:
        check_delta(delta, "--delta")
    if ledger is not None and (epsilon is not None or delta is not None):
        raise ConfigError("--epsilon/--delta are not allowed with --ledger: the ledger "
                          "certifies the spend (the budget is given once)")
    target = out or (Path("audit-report") if model is not None else Path(run_dir) / "audit")
    check_out_dir(target, force=force)
    if model is not None:
        run = _model_run(model, members, nonmembers, population, attack, n_shadow, ledger,
                         epsilon, delta, seed)
    else:
        run = run_dir
    with progress("audit", transient=True):
        report = privacy_report(run, confidence=confidence, rng=seed)
    json_path, html_path = report.write(target)
    if json_:
        print_json(report.data)
        return
    rows = []
    for e in report.data["runs"]:
        cert, best = e.get("certified"), e.get("empirical_epsilon_best")
        sm = e["mi"].get("sample_model", {})
        rows.append((e["label"], f"{round_bound(cert['epsilon'], True)} ({cert['source']})"
                     if cert else "none",
                     round_bound(best["epsilon"], False) if best else "-",
                     f"{e['attack']['auc']:.3f}" if "attack" in e else "-",
                     f"{sm['value_nats']:.3g}" if "value_nats" in sm else "-",
                     "-" if e.get("accuracy") is None else f"{e['accuracy']:.3f}"))
    print_table(rows, ["run", "certified eps", f"empirical eps >= ({confidence:g})", "AUC",
                       "sample-model MI (nats)", "accuracy"], title="veil privacy audit")
    say(TWO_FIGURES)
    say(headline(report.data))
    say(f"report: {html_path}  ({json_path.name} beside it)")
