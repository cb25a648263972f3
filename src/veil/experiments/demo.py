"""The main demonstration (``veil demo``, ``make demo``): the hybrid approach end to end.

Ten parties hold disjoint parts of UCI Nursery and UCI Adult. A dealer sets up a 2048-bit
threshold Paillier key (t = 5 honest parties assumed, so any t_bar = 6 parties decrypt).
Two learners run as aggregate queries over the real protocol
(:class:`veil.fl.hybrid_run.HybridAggregator`: every answer encrypted, summed as
ciphertexts, decrypted by t_bar parties with verified proofs): an ID3 decision tree on
Nursery (count queries) and logistic regression on Adult (clipped-gradient sums). Beside the
hybrid run the same learners run with the baselines: no privacy (plain sums), SMC only
(encrypted, no noise), central DP (the aggregator adds the noise) and local DP (every
party adds the full noise), each with its own Ledger of the same budget. Reported per run:
test accuracy, epsilon spent, wall time and the bytes on the wire.

Without the UCI files (a machine with neither ``../shared/datasets`` nor internet) the
bundled digits data set stands in for both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from veil.datasets import available, partition
from veil.dp.ledger import Ledger
from veil.experiments.tasks import load_task, make_learner
from veil.fl.hybrid_protocol import Agreement, HybridKeys, deal_keys
from veil.fl.hybrid_run import HybridAggregator
from veil.learn.queries import METHODS, fit_queries, plan_multiplier
from veil.random import check_rng

__all__ = ["DemoRun", "DemoReport", "run_demo", "KEY_BITS"]

#: the key size of the demonstration: the smallest veil accepts outside tests (NIST SP
#: 800-57 puts a 2048-bit factoring modulus at 112-bit security)
KEY_BITS = 2048
_ORDER = ("none", "smc", "central", "hybrid", "local")


@dataclass
class DemoRun:
    """One learner trained with one method."""

    task: str
    method: str
    trust: int | None
    accuracy: float
    epsilon: float
    delta: float
    seconds: float
    bytes_up: int
    bytes_down: int
    queries: int


@dataclass
class DemoReport:
    """Everything the demonstration measured."""

    parties: int
    trust: int
    threshold: int
    key_bits: int
    keygen_seconds: float
    epsilon: float
    delta: float
    noise: str
    runs: list[DemoRun] = field(default_factory=list)


def _tasks(quick: bool) -> list[tuple[str, str, dict[str, Any]]]:
    tree = ("nursery", "tree") if available("nursery") else ("digits", "tree")
    logreg = ("adult", "logreg") if available("adult-train") and available("adult-test") \
        else ("digits", "logreg")
    rounds = {"rounds": 4 if quick else 30}
    depth = {"max_depth": 2 if quick else 4}
    return [(*tree, depth), (*logreg, rounds)]


def run_demo(*, parties: int = 10, epsilon: float = 1.0, delta: float = 1e-5,
             noise: str = "skellam", key_bits: int = KEY_BITS, quick: bool = False,
             on_run: Callable[[int, int, str], None] | None = None,
             rng: Any = None) -> DemoReport:
    """Run the demonstration (module docstring); ``quick``: shallow tree, 4 rounds and, if
    ``key_bits`` < 2048, an insecure test key (for tests only). ``on_run(done, total, what)``
    is called before each training run."""
    rng = check_rng(rng)
    trust = math.ceil(parties / 2)
    start = time.perf_counter()
    keys: HybridKeys = deal_keys(parties, trust, bits=key_bits, insecure_ok=key_bits < 2048,
                                 rng=rng)
    report = DemoReport(parties, trust, parties - trust + 1, key_bits,
                        time.perf_counter() - start, epsilon, delta, noise)
    tasks = _tasks(quick)
    total, done = len(tasks) * len(_ORDER), 0
    for dataset, model, options in tasks:
        task = load_task(dataset, model, rng=rng)
        parts = partition.iid(task.y_train.size, parties, rng=rng)
        data = [(task.X_train[p], task.y_train[p]) for p in parts]
        z = plan_multiplier(make_learner(task, **options), noise, epsilon, delta)
        for method in _ORDER:
            if on_run is not None:
                on_run(done, total, f"{dataset} {model}: {method}")
            done += 1
            t = trust if METHODS[method].encrypted else None
            agreement = Agreement(parties, method, trust=t, noise=noise,
                                  noise_multiplier=z, delta=delta)
            ledger = Ledger(epsilon, delta) if METHODS[method].noise else None
            began = time.perf_counter()
            aggregator = HybridAggregator(data, agreement,
                                          keys=keys if agreement.encrypted else None)
            fit = fit_queries(make_learner(task, **options), aggregator, method=method,
                              trust=t, noise=noise, ledger=ledger, noise_multiplier=z,
                              delta=delta, rng=rng)
            seconds = time.perf_counter() - began
            spent = ledger.spent()[0] if ledger is not None else 0.0
            report.runs.append(DemoRun(
                f"{dataset} {model}", method, t, float(fit.model.score(task.X_test, task.y_test)),
                spent, delta if ledger is not None else 0.0, seconds,
                sum(r.bytes_up for r in aggregator.reports),
                sum(r.bytes_down for r in aggregator.reports), fit.queries))
    if on_run is not None:
        on_run(total, total, "done")
    return report
