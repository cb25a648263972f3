"""AIM (McKenna, Mullins, Sheldon & Miklau 2022, "AIM: an adaptive and iterative mechanism
for differentially private synthetic data", VLDB 15(11)), their Algorithm 2.

The workload ``W`` (default: every 3-way marginal, weight 1; fewer columns: the whole table)
and its downward closure ``W+`` are the candidates; candidate ``r`` weighs
``w_r = sum_{s in W} c_s |r & s|``. With ``T = 16 d`` and ``alpha = 0.9``:

1. every one-way marginal with noise ``sigma = sqrt(T / (2 alpha rho))``, the selection
   budget ``epsilon = sqrt(8 (1 - alpha) rho / T)``;
2. rounds: when what is left, ``rho - rho_used``, is at most twice a round's cost
   ``1 / (2 sigma^2) + epsilon^2 / 8``, the last round takes all of it (``sigma =
   sqrt(1 / (2 alpha left))``, ``epsilon = sqrt(8 (1 - alpha) left)``). Among the candidates
   whose addition keeps the model within ``rho_used / rho`` of ``max_cells``, the
   exponential mechanism (sensitivity ``max w_r``) picks ``r`` with quality
   ``w_r (||M_r(D) - M_r(p)||_1 - sqrt(2 / pi) sigma n_r)`` (``n_r`` cells: the expected
   L1 of the noise, so a marginal is only worth measuring where the model errs by more),
   measures it with noise ``sigma`` and refits the model (warm start). If the refit moved
   ``M_r`` by at most ``sqrt(2 / pi) sigma n_r``, the measurement was too noisy to matter:
   sigma halves and epsilon doubles (budget annealing).

The rounds spend exactly rho in all (composition of zCDP, adaptive: a filter on the
total). Intermediate fits run ``round_iters`` iterations, the last one ``iters`` (both warm
started from the previous round's potentials: on the 9-column Adult at epsilon 4 the last
fit at 300 iterations scores a workload error of 0.0583 against 0.0580 at 1,000, one seed,
for a third of its cost; benchmarks/RESULTS.md).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Sequence

import numpy as np

from veil._validation import check_int, check_positive
from veil.errors import ConfigError
from veil.random import Generator, RngLike
from veil.synth.base import DEFAULT_MAX_CELLS, Synthesizer, measure, select
from veil.synth.model import GraphicalModel, estimate, marginal_counts, model_cells
from veil.synth.schema import Schema

__all__ = ["AIM", "default_workload"]

logger = logging.getLogger(__name__)

_ALPHA = 0.9


def default_workload(d: int, way: int = 3) -> list[tuple[int, ...]]:
    """Every ``way``-way set of ``d`` columns (all columns when there are fewer)."""
    return list(itertools.combinations(range(d), min(way, d)))


class AIM(Synthesizer):
    """Adaptive, workload-aware synthesizer (see the module docstring).

    ``workload``: column-name tuples (or None: all 3-way marginals), ``weights`` (default 1),
    ``round_iters``: iterations of each intermediate refit; ``progress``: called with the
    share of rho used after each round (for a progress bar).
    """

    method = "aim"

    def __init__(self, schema: Schema, *, epsilon: float, delta: float,
                 workload: Sequence[Sequence[str]] | None = None,
                 weights: Sequence[float] | None = None, iters: int = 300,
                 round_iters: int = 100, max_cells: int = DEFAULT_MAX_CELLS,
                 rng: RngLike = None, progress: Callable[[float], None] | None = None) -> None:
        super().__init__(schema, epsilon=epsilon, delta=delta, iters=iters,
                         max_cells=max_cells, rng=rng)
        self.workload = workload
        self.weights = weights
        self.round_iters = round_iters
        self.progress = progress

    def _sets(self) -> tuple[list[tuple[int, ...]], list[float]]:
        """The workload as sorted column-index tuples and their weights (ConfigError)."""
        names = self.schema.names
        if self.workload is None:
            sets = default_workload(len(names))
        else:
            sets = []
            for entry in self.workload:
                cols = [entry] if isinstance(entry, str) else list(entry)
                unknown = [c for c in cols if c not in names]
                if unknown or not cols or len(set(cols)) != len(cols):
                    raise ConfigError(f"workload entry {entry!r} is not allowed: distinct "
                                      f"schema columns (unknown: {unknown})")
                sets.append(tuple(sorted(names.index(c) for c in cols)))
            if not sets:
                raise ConfigError("workload=[] is not allowed: at least one marginal")
        weights = [1.0] * len(sets) if self.weights is None else \
            [check_positive(w, "weights") for w in self.weights]
        if len(weights) != len(sets):
            raise ConfigError(f"weights has {len(weights)} entries for {len(sets)} workload "
                              "marginals")
        return sets, weights

    def _check(self) -> Schema:
        schema = super()._check()
        check_int(self.round_iters, "round_iters", low=1)
        self._sets()
        return schema

    def _fit(self, codes: np.ndarray, sizes: tuple[int, ...], rho: float,
             rng: Generator) -> GraphicalModel:
        d = len(sizes)
        workload, weights = self._sets()
        closure = sorted({sub for s in workload for k in range(1, len(s) + 1)
                          for sub in itertools.combinations(s, k)})
        w = {r: sum(c * len(set(r) & set(s)) for s, c in zip(workload, weights))
             for r in closure}
        cells = {r: math.prod(sizes[a] for a in r) for r in closure}
        closure = [r for r in closure if cells[r] <= self.max_cells]
        truth = {r: marginal_counts(codes, sizes, r) for r in closure}
        rounds = 16 * d
        sigma = math.sqrt(rounds / (2.0 * _ALPHA * rho))
        epsilon = math.sqrt(8.0 * (1.0 - _ALPHA) * rho / rounds)
        measurements = [measure(codes, sizes, (a,), sigma, rng) for a in range(d)]
        used = d / (2.0 * sigma ** 2)
        model, theta = estimate(sizes, measurements, iters=self.round_iters)
        last = False
        while not last:
            left = rho - used
            if left <= 2.0 * (1.0 / (2.0 * sigma ** 2) + epsilon ** 2 / 8.0):
                sigma = math.sqrt(1.0 / (2.0 * _ALPHA * left))
                epsilon = math.sqrt(8.0 * (1.0 - _ALPHA) * left)
                last = True
            used += 1.0 / (2.0 * sigma ** 2) + epsilon ** 2 / 8.0
            limit = used / rho * self.max_cells
            sets = sorted({m.attrs for m in measurements})
            candidates = [r for r in closure if model.tree.home(r) is not None
                          or model_cells(sizes, sets + [r]) <= limit]
            bias = math.sqrt(2.0 / math.pi) * sigma
            scores = np.array([w[r] * (np.abs(truth[r] - model.total * model.marginal(r)).sum()
                                        - bias * cells[r]) for r in candidates])
            pick = candidates[select(scores, epsilon, max(w[r] for r in candidates), rng)]
            before = model.total * model.marginal(pick)
            measurements.append(measure(codes, sizes, pick, sigma, rng))
            model, theta = estimate(sizes, measurements, warm=theta,
                                    iters=self.iters if last else self.round_iters)
            moved = float(np.abs(model.total * model.marginal(pick) - before).sum())
            if not last and moved <= bias * cells[pick]:
                sigma, epsilon = sigma / 2.0, epsilon * 2.0
            logger.info("aim: round %d picked %s (%d cells), rho used %.3g of %.3g",
                        len(measurements) - d, pick, cells[pick], used, rho)
            if self.progress is not None:
                self.progress(min(1.0, used / rho))
        self.measurements_ = measurements
        return model
