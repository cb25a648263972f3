"""The main demonstration (``veil demo``, ``make demo``): the hybrid approach end to end.

Ten parties hold disjoint parts of UCI Nursery and UCI Adult. A dealer sets up a 2048-bit
threshold Paillier key (t = 5 honest parties assumed, so any threshold = 6 parties decrypt).
Two learners run as aggregate queries over the real protocol
(:class:`veil.fl.hybrid.run.HybridAggregator`: every answer encrypted, summed as
ciphertexts, decrypted by threshold parties with verified proofs): an ID3 decision tree on
Nursery (count queries) and logistic regression on Adult (clipped-gradient sums). Beside the
hybrid run the same learners run with the baselines: no privacy (plain sums), SMC only
(encrypted, no noise), central DP (the aggregator adds the noise) and local DP (every
party adds the full noise), each with its own Ledger of the same budget. Reported per run:
test accuracy, epsilon spent, wall time and the bytes on the wire.

Without the UCI files (a machine with neither ``../shared/datasets`` nor internet) the
bundled digits data set stands in for both.

Every trained model is also audited (:mod:`veil.experiments.membership`): before training,
``audit_records`` training records are drawn and a fair coin keeps each in or out of its
party's data; afterwards the loss attack scores them. With ``out`` the demonstration is
written as a run directory (:mod:`veil.audit.rundir`): one record per (task, method) with its
persisted Ledger (``out/ledgers/``), accuracy, cost and attack scores, which
:func:`veil.audit.privacy_report` (``veil demo`` does it, into ``out/audit``) turns into the
certified epsilon next to the empirical lower bound of each model.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from veil._validation import check_int
from veil.audit import AttackResult, Run, RunRecord, write_run
from veil.datasets import available, partition
from veil.dp.ledger import Ledger
from veil.dp.trust import Trust
from veil.experiments.membership import AuditPool
from veil.experiments.runs import ledger_folder, persisted_ledger
from veil.experiments.tasks import load_task, make_learner
from veil.fl.hybrid.fit import METHODS, fit_queries, plan_multiplier
from veil.fl.hybrid.protocol import Agreement, HybridKeys, deal_keys
from veil.fl.hybrid.run import HybridAggregator
from veil.fl.runtime import LocalRuntime
from veil.random import RngLike, check_rng

__all__ = ["DemoRun", "DemoReport", "run_demo", "KEY_BITS", "METHOD_LABELS", "AUDIT_RECORDS"]

#: the key size of the demonstration: the smallest veil accepts outside tests (NIST SP
#: 800-57 puts a 2048-bit factoring modulus at 112-bit security)
KEY_BITS = 2048
_ORDER = ("none", "smc", "central", "hybrid", "local")
METHOD_LABELS = {"none": "no privacy", "smc": "SMC only", "central": "central DP",
                 "hybrid": "hybrid", "local": "local DP"}
#: audit records per task (at most a quarter of its training set): perfect guesses on 1000
#: certify epsilon ~5 at confidence 0.95, so the audit could see far above the budget of 1
AUDIT_RECORDS = 1000


@dataclass
class DemoRun:
    """One learner trained with one method; ``clipped``: answers clipped to their bound,
    ``ledger``: its persisted Ledger (relative to the run directory), ``attack``: the loss
    attack on the audit records."""

    task: str
    method: str
    trust: Trust | None    # the hybrid's (honest, threshold); None for the other methods
    accuracy: float
    epsilon: float
    delta: float
    seconds: float
    bytes_up: int
    bytes_down: int
    queries: int
    clipped: int = 0
    ledger: str | None = None
    attack: AttackResult | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return _label(self.task, self.method, self.trust)

    def record(self) -> RunRecord:
        """This model as a record of a run directory (one curve of its own in the plots)."""
        arrays = {} if self.attack is None else {
            "member_scores": self.attack.member_scores,
            "nonmember_scores": self.attack.nonmember_scores}
        return RunRecord(
            label=self.label, group=self.label, ledger=self.ledger,
            delta=self.delta if self.ledger else None, accuracy=self.accuracy,
            metrics={"clipped": self.clipped, **({} if self.trust is None else {
                "honest": self.trust.honest, "threshold": self.trust.threshold})},
            cost={"seconds": round(self.seconds, 3), "bytes_up": self.bytes_up,
                  "bytes_down": self.bytes_down, "queries": self.queries},
            arrays=arrays)


def _label(task: str, method: str, trust: Trust | None) -> str:
    return f"{task}: {METHOD_LABELS[method]}" + (
        f" honest={trust.honest}, threshold {trust.threshold}" if method == "hybrid" else "")


@dataclass
class DemoReport:
    """Everything the demonstration measured (``audit_records``: requested per task;
    ``run_dir``: where the run directory was written, if it was)."""

    parties: int
    honest: int
    threshold: int
    key_bits: int
    keygen_seconds: float
    epsilon: float
    delta: float
    noise: str
    audit_records: int = 0
    run_dir: str | None = None
    runs: list[DemoRun] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain values: the runs with their labels and attack metrics, not the scores."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "runs"}
        out["runs"] = [{**{f.name: getattr(r, f.name) for f in fields(r)
                           if f.name not in ("attack", "trust")},
                        "honest": None if r.trust is None else r.trust.honest,
                        "threshold": None if r.trust is None else r.trust.threshold,
                        "label": r.label,
                        "attack": None if r.attack is None else r.attack.metrics()}
                       for r in self.runs]
        return out


def _tasks(quick: bool) -> list[tuple[str, str, dict[str, Any]]]:
    tree = ("nursery", "tree") if available("nursery") else ("digits", "tree")
    logreg = ("adult", "logreg") if available("adult-train") and available("adult-test") \
        else ("digits", "logreg")
    rounds = {"rounds": 4 if quick else 30}
    depth = {"max_depth": 2 if quick else 4}
    return [(*tree, depth), (*logreg, rounds)]


def run_demo(*, parties: int = 10, epsilon: float = 1.0, delta: float = 1e-5,
             noise: str = "skellam", key_bits: int = KEY_BITS, quick: bool = False,
             out: str | os.PathLike | None = None, audit_records: int = AUDIT_RECORDS,
             on_progress: Callable[[int, int, str], None] | None = None,
             rng: RngLike = None) -> DemoReport:
    """Run the demonstration (module docstring); ``quick``: shallow tree, 4 rounds and, if
    ``key_bits`` < 2048, an insecure test key (for tests only). ``out``: write the run
    directory there (ledgers under ``out/ledgers``; a rerun replaces them).
    ``audit_records``: audit records per task (at most a quarter of its training set).
    ``on_progress(done, total, what)`` is called before each training run."""
    audit_records = check_int(audit_records, "audit_records", low=2)
    rng = check_rng(rng)
    trust = Trust(parties, math.ceil(parties / 2))
    folder = None if out is None else ledger_folder(Path(out) / "ledgers")
    start = time.perf_counter()
    keys: HybridKeys = deal_keys(trust, bits=key_bits, insecure_ok=key_bits < 2048,
                                 rng=rng)
    report = DemoReport(parties, trust.honest, trust.threshold, key_bits,
                        time.perf_counter() - start, epsilon, delta, noise, audit_records)
    tasks = _tasks(quick)
    total, done = len(tasks) * len(_ORDER), 0
    for dataset, model, options in tasks:
        task = load_task(dataset, model, rng=rng)
        n_train = task.y_train.size
        pool = AuditPool.draw(n_train, min(audit_records, n_train // 4), rng=rng)
        parts = partition.iid(n_train, parties, rng=rng)
        data = pool.party_data(task.X_train, task.y_train, parts)
        z = plan_multiplier(make_learner(task, **options), noise, epsilon, delta)
        name = f"{dataset} {model}"
        for method in _ORDER:
            if on_progress is not None:
                on_progress(done, total, f"{name}: {method}")
            done += 1
            trusted = trust if METHODS[method].encrypted else None
            agreement = Agreement(parties, method, trust=trusted, noise=noise,
                                  noise_multiplier=z, delta=delta)
            ledger = None
            if METHODS[method].noise:
                ledger = Ledger(epsilon, delta) if folder is None else persisted_ledger(
                    folder, _label(name, method, trusted), epsilon, delta)
            began = time.perf_counter()
            aggregator = HybridAggregator(data, agreement, runtime=LocalRuntime(),
                                          keys=keys if agreement.encrypted else None)
            fit = fit_queries(make_learner(task, **options), aggregator, method=method,
                              trust=trusted, noise=noise, ledger=ledger, noise_multiplier=z,
                              rng=rng)
            seconds = time.perf_counter() - began
            spent = 0.0
            if ledger is not None:
                spent = ledger.spent()[0]
                ledger.close()
            scores = pool.scores(fit.model, task.X_train, task.y_train)
            report.runs.append(DemoRun(
                name, method, trusted, float(fit.model.score(task.X_test, task.y_test)),
                spent, delta if ledger is not None else 0.0, seconds,
                sum(r.bytes_up for r in aggregator.reports),
                sum(r.bytes_down for r in aggregator.reports), fit.queries, fit.clipped,
                None if ledger is None or folder is None else
                f"{folder.name}/{Path(ledger.path).name}",
                AttackResult.from_scores(scores["member_scores"], scores["nonmember_scores"],
                                         "loss")))
    if out is not None:
        write_run(out, Run(name=f"veil demo: the hybrid approach, {parties} parties",
                           kind="hybrid", records=[r.record() for r in report.runs]))
        report.run_dir = str(out)
    if on_progress is not None:
        on_progress(total, total, "done")
    return report
