"""The comparison of Truex et al. (AISec 2019): accuracy against epsilon for each method.

For each number of parties n, each repetition draws a train/test split (where the data
set has none) and an IID partition of the training data between the parties; on that same
partition every method trains the same learner (:mod:`veil.experiments.tasks`):
no privacy (exact sums: plain aggregation or SMC, which give the same model), central DP,
local DP, and the hybrid with each count t of honest parties assumed (``honest``; any
``threshold = n - t + 1`` of them decrypt: :class:`veil.dp.trust.Trust`). The noise of
each epsilon is calibrated once (:func:`veil.fl.hybrid.fit.plan_multiplier`) and shared by
the methods, which differ only in where the noise is added, so the comparison isolates the
effect of the trust assumption: aggregate noise variance ``sigma^2`` (central),
``n/t sigma^2`` (hybrid), ``n sigma^2`` (local).

This sweep is a **noise-only simulation**: :class:`~veil.fl.hybrid.fit.SimulatedAggregator`
sums the very integers the encrypted protocol sums, without encrypting them. A sum of
Paillier ciphertexts decrypts to the sum of the plaintexts, and the tests
(``tests/fl/test_hybrid_protocol.py``) check that runs through the real threshold-Paillier
protocol have the same result distribution (benchmarks/RESULTS.md records it).

Ledgers use the RDP accountant here (faster than PLD when a sweep charges thousands of
queries, and never below it in epsilon), and the noise is calibrated with the same. Given a
folder, every model's Ledger is persisted there, and :func:`truex_run` describes the sweep as
a run directory (:mod:`veil.audit.rundir`) whose privacy report
(:func:`veil.audit.privacy_report`) sets each cell's certified epsilon beside its accuracy.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from veil._io import atomic_open, atomic_write
from veil._validation import check_choice, check_delta, check_epsilon, check_int
from veil.audit import Run, RunRecord
from veil.datasets import partition
from veil.dp.distributed import NOISES
from veil.dp.ledger import Ledger
from veil.dp.trust import Trust
from veil.errors import ConfigError
from veil.experiments.runs import ledger_folder, persisted_ledger
from veil.experiments.tasks import DATASETS, MODELS, Task, load_task, make_learner
from veil.fl.hybrid.fit import SimulatedAggregator, fit_queries, plan_multiplier
from veil.random import RngLike, check_rng

__all__ = ["TruexConfig", "parse_honest", "run_truex", "summarize", "truex_run", "write_csv",
           "plot"]

#: the noise each model used in the paper: Laplace counts for trees (Friedman & Schuster),
#: Gaussian gradients (with a moments accountant) for the others
PAPER_NOISE = {"tree": "laplace", "logreg": "gaussian", "svm": "gaussian", "nn": "gaussian"}


@dataclass
class TruexConfig:
    """One sweep: a task, the party counts, honest counts, epsilons and repetitions.

    ``honest``: t, the fewest honest parties assumed, as tokens ``"1"``, ``"half"``
    (ceil(n/2)), ``"n"`` or an integer, per n.
    ``noise``: None for the paper's choice (:data:`PAPER_NOISE`), else a
    :data:`veil.dp.distributed.NOISES` name. ``options`` override the learner's defaults.
    """

    dataset: str = "nursery"
    model: str = "tree"
    parties: Sequence[int] = (10,)
    honest: Sequence[str] = ("1", "half", "n")
    epsilons: Sequence[float] = (0.1, 0.5, 1.0, 2.0, 5.0)
    repeats: int = 3
    noise: str | None = None
    delta: float = 1e-5
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_choice(self.dataset, "dataset", DATASETS)
        check_choice(self.model, "model", MODELS)
        if not self.parties:
            raise ConfigError("parties=[] is not allowed: give at least one party count")
        self.parties = [check_int(n, "parties", low=2) for n in self.parties]
        for n in self.parties:
            for token in self.honest:
                parse_honest(token, n)
        if not self.epsilons:
            raise ConfigError("epsilons=[] is not allowed: give at least one epsilon")
        self.epsilons = [check_epsilon(e) for e in self.epsilons]
        self.repeats = check_int(self.repeats, "repeats", low=1)
        if self.noise is None:
            self.noise = PAPER_NOISE[self.model]
        check_choice(self.noise, "noise", tuple(NOISES))
        self.delta = check_delta(self.delta)


def parse_honest(token: Any, parties: int) -> Trust:
    """The :class:`~veil.dp.trust.Trust` of ``parties`` whose honest count t is given by a
    token: ``"n"``, ``"half"`` (ceil(n/2)) or an integer in 1..n."""
    text = str(token).strip().lower()
    if text == "n":
        return Trust(parties, parties)
    if text == "half":
        return Trust(parties, math.ceil(parties / 2))
    try:
        t = int(text)
    except ValueError:
        raise ConfigError(f"honest={token!r} is not allowed: use 1..n, 'half' or 'n'") from None
    try:
        return Trust(parties, t)
    except ConfigError as exc:
        raise ConfigError(f"honest={token!r} is not allowed with {parties} parties: "
                          f"{exc}") from None


def _methods(config: TruexConfig, n: int) -> list[tuple[str, Trust | None]]:
    trusts = {trust.honest: trust for trust in (parse_honest(tok, n) for tok in config.honest)}
    return [("central", None), *[("hybrid", trusts[t]) for t in sorted(trusts)],
            ("local", None)]


def run_truex(config: TruexConfig, *, ledgers: str | os.PathLike | None = None,
              rng: RngLike = None,
              on_progress: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    """Run the sweep; one row per (parties, method, honest, epsilon, repetition), with the
    hybrid's threshold beside its honest count,
    model's accuracy, the epsilon its Ledger spent, its queries and training seconds.

    ``ledgers``: a folder to persist every model's Ledger in (:mod:`veil.experiments.runs`;
    ledger files an earlier sweep left there are removed), named in the rows' ``ledger``
    column. ``on_progress(done, total, what)`` is called after every training run.
    """
    rng = check_rng(rng)
    folder = None if ledgers is None else ledger_folder(ledgers)
    total = sum(config.repeats * (1 + len(config.epsilons) * len(_methods(config, n)))
                for n in config.parties)
    done = 0
    rows: list[dict[str, Any]] = []
    ledger_delta = 0.0 if config.noise == "laplace" else config.delta

    def train(task: Task, agg: SimulatedAggregator, n: int, method: str, trust: Trust | None,
              eps: float | None, z: float | None, r: int) -> None:
        nonlocal done
        ledger = None
        if eps is not None:
            ledger = Ledger(eps, ledger_delta, accountant="rdp") if folder is None else \
                persisted_ledger(folder, f"n={n} {_label(method, trust)} eps={eps:g} r{r}", eps,
                                 ledger_delta, accountant="rdp")
        began = time.perf_counter()
        fit = fit_queries(make_learner(task, **config.options), agg, method=method,
                          trust=trust,
                          noise=config.noise, ledger=ledger, noise_multiplier=z, rng=rng)
        seconds = time.perf_counter() - began
        spent = 0.0
        if ledger is not None:
            spent = ledger.spent()[0]
            ledger.close()
        rows.append({"dataset": config.dataset, "model": config.model, "noise": config.noise,
                     "parties": n, "method": method,
                     "honest": "" if trust is None else trust.honest,
                     "threshold": "" if trust is None else trust.threshold,
                     "epsilon": eps if eps is not None else "", "repeat": r,
                     "accuracy": float(fit.model.score(task.X_test, task.y_test)),
                     "epsilon_spent": spent, "queries": fit.queries, "clipped": fit.clipped,
                     "seconds": seconds,
                     "ledger": "" if ledger is None or folder is None else
                     os.path.basename(ledger.path)})
        done += 1
        if on_progress is not None:
            label = method if trust is None else _label(method, trust)
            on_progress(done, total, f"n={n} {label} eps={eps if eps is not None else '-'}")

    for n in config.parties:
        for r in range(config.repeats):
            task = load_task(config.dataset, config.model, rng=rng)
            parts = partition.iid(task.y_train.size, n, rng=rng)
            agg = SimulatedAggregator([(task.X_train[p], task.y_train[p]) for p in parts])
            train(task, agg, n, "none", None, None, None, r)
            for eps in config.epsilons:
                z = plan_multiplier(make_learner(task, **config.options), config.noise, eps,
                                    config.delta, accountant="rdp")
                for method, trust in _methods(config, n):
                    train(task, agg, n, method, trust, eps, z, r)
    return rows


def _cells(rows: Sequence[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The rows of each configuration (dataset, model, noise, parties, method, honest,
    threshold, epsilon): the repetitions of one cell of the sweep."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["dataset"], row["model"], row["noise"], row["parties"], row["method"],
               row["honest"], row["threshold"], row["epsilon"])
        groups.setdefault(key, []).append(row)
    return groups


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and standard deviation of the accuracy over repetitions, per configuration."""
    out = []
    for (dataset, model, noise, n, method, t, threshold, eps), cell in _cells(rows).items():
        a = np.array([float(row["accuracy"]) for row in cell])
        out.append({"dataset": dataset, "model": model, "noise": noise, "parties": n,
                    "method": method, "honest": t, "threshold": threshold, "epsilon": eps,
                    "repeats": a.size,
                    "accuracy_mean": float(a.mean()),
                    "accuracy_std": float(a.std(ddof=1)) if a.size > 1 else 0.0})
    return out


def truex_run(rows: Sequence[dict[str, Any]], config: TruexConfig, *,
              ledgers: str | None = None) -> Run:
    """The sweep as a run directory's content: one record per (parties, method, honest,
    epsilon) cell, a curve across epsilon per (parties, method, honest).

    A record holds the cell's mean accuracy (the standard deviation and the number of
    repetitions in its metrics), its mean cost, and its privacy: every model of the cell
    spent at most the largest spend of its repetitions, so the record points at that
    repetition's ledger file (``ledgers``: the folder the rows' ledger files are in,
    relative to the run directory) or, without persisted ledgers, declares that epsilon.
    """
    records = []
    for (_, _, _, n, method, _, _, eps), cell in _cells(rows).items():
        curve = f"n={n}: {_label(method, _trust(cell[0]))}"
        top = max(cell, key=lambda row: float(row["epsilon_spent"]))
        a = np.array([float(row["accuracy"]) for row in cell])
        ledger = f"{ledgers}/{top['ledger']}" if ledgers and top["ledger"] else None
        private = method != "none"
        records.append(RunRecord(
            label=f"{curve}, eps={eps:g}" if private else curve, group=curve, ledger=ledger,
            epsilon=float(top["epsilon_spent"]) if private and ledger is None else None,
            delta=(0.0 if config.noise == "laplace" else config.delta) if private else None,
            accuracy=float(a.mean()),
            metrics={"accuracy_std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
                     "repeats": int(a.size), **({"epsilon_budget": eps} if private else {})},
            cost={"seconds": round(float(np.mean([row["seconds"] for row in cell])), 4),
                  "queries": float(np.mean([row["queries"] for row in cell]))}))
    return Run(name=f"veil experiment truex: {config.dataset}, {config.model}, "
                    f"{config.noise} noise", kind="hybrid", records=records)


def write_csv(rows: Sequence[dict[str, Any]], path: str | os.PathLike) -> None:
    """Write rows (all with the same keys) as CSV."""
    rows = list(rows)
    if not rows:
        raise ConfigError("no rows to write")
    with atomic_open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _trust(row: dict[str, Any]) -> Trust | None:
    """The hybrid's Trust of a row or summary row (None for the other methods); rows read
    back from CSV hold strings."""
    honest = row.get("honest")
    return None if honest in ("", None) else Trust(int(row["parties"]), int(honest))


def _label(method: str, trust: Trust | None) -> str:
    if method == "hybrid":
        return f"hybrid honest={trust.honest}, threshold {trust.threshold}"
    return {"central": "central DP", "local": "local DP", "none": "no privacy / SMC"}[method]


def plot(summary: Sequence[dict[str, Any]], path: str | os.PathLike,
         title: str | None = None) -> None:
    """Accuracy against epsilon (log axis), one panel per party count, error bars = 1 sd."""
    from veil import _plotting

    plt = _plotting.pyplot()
    counts = sorted({int(s["parties"]) for s in summary})
    fig, axes = plt.subplots(1, len(counts), figsize=(5.5 * len(counts), 4.2), squeeze=False)
    for ax, n in zip(axes[0], counts):
        rows = [s for s in summary if int(s["parties"]) == n]
        for s in rows:
            if s["method"] == "none":
                ax.axhline(s["accuracy_mean"], color="grey", linestyle="--",
                           label=_label("none", None))
        curves: dict[tuple[str, Any], list[dict[str, Any]]] = {}
        for s in rows:
            if s["method"] != "none":
                curves.setdefault((s["method"], s["honest"]), []).append(s)
        order = sorted(curves, key=lambda k: (k[0] != "central", k[0] == "local",
                                              -int(k[1] or 0)))
        for method, t in order:
            pts = sorted(curves[(method, t)], key=lambda s: float(s["epsilon"]))
            ax.errorbar([float(s["epsilon"]) for s in pts], [s["accuracy_mean"] for s in pts],
                        yerr=[s["accuracy_std"] for s in pts], marker="o", capsize=3,
                        label=_label(method, _trust(pts[0])))
        _plotting.epsilon_axis(ax, [float(s["epsilon"]) for s in rows if s["method"] != "none"])
        ax.set_xlabel("epsilon")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{n} parties")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        _plotting.title(fig, title)
    fig.tight_layout()
    atomic_write(path, _plotting.png(fig, dpi=120))
    plt.close(fig)
