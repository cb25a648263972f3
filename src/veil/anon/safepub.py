"""(epsilon, delta)-differentially private publishing by random sampling + generalization.

SafePub (Bild, Kuhn & Prasser, "SafePub: A Truthful Data Anonymization Algorithm With
Strong Privacy Guarantees", PoPETs 2018), after Li, Qardaji & Su (ASIACCS 2012):

1. every record is kept independently with probability ``beta = 1 - exp(-epsilon_anon)``
   (from :mod:`veil.random`'s CSPRNG; a seeded ``rng`` is a labelled simulation whose
   epsilon is not certified);
2. each quasi-identifier is generalized to one level for the whole table: the levels the
   caller fixed in advance (``levels``: never chosen from the data; ``epsilon_anon =
   epsilon``), or the levels SafePub's search picks from the sample with the exponential
   mechanism (``epsilon_anon = epsilon - search_epsilon``; below);
3. the classes of fewer than k records are removed, k the smallest integer with
   ``d(k) <= delta``.

Guarantee of steps 1-3 with fixed levels (Li et al. 2012, Theorem 5; the bound SafePub
computes): (epsilon_anon, delta)-DP for ``epsilon_anon >= -ln(1 - beta)`` with
``d(k) = max_{n >= n_m} sum_{j > gamma n} Binomial(j; n, beta)``,
``gamma = (e^epsilon - 1 + beta) / e^epsilon`` and ``n_m = ceil(k / gamma - 1)``; the
maximum is taken until the Chernoff bound ``exp(-n (gamma ln(gamma / beta) - (gamma -
beta)))`` of the remaining terms falls below it (as ARX does; floors taken downwards,
which only adds protection).

ARX's k is this k + 1: its ``ParameterCalculation.calculateK`` increments k once more
after the first k whose d(k) is below delta (and compares in interval arithmetic, d(k) <
delta strictly). Both releases are (epsilon, delta)-DP, d decreasing in k; veil's keeps
the classes of exactly k records, which ARX removes. With fixed levels and ARX's sampling
stream replayed, veil's release less those classes is ARX's to the record (ARX's
``TestAnonymizationDifferentialPrivacy`` cases 0-5 and 18, tests/anon/test_arx_models.py).

The search (Bild et al. 2018, Section 5; ARX's ``DataDependentEDDPAlgorithm``) walks
the generalization lattice from its top, the pivot: each of ``steps`` steps adds the
pivot's direct specializations (one level lower in one attribute) to the candidates and
draws the next pivot from all candidates not yet drawn with the exponential mechanism at
``e = search_epsilon / (2 steps)``: a candidate g with probability proportional to
``exp(e u(g) / 2)``, ``u`` a score of g on the sample divided by a bound of its
sensitivity (below), so that each draw is e-DP. The release draws its levels among the
pivots (the top included) with the same mechanism at ``search_epsilon / 2``. Steps 1-3 on
the sample with these levels are (epsilon_anon + search_epsilon, delta)-DP (Bild et al.
2018, Section 5: sequential composition of the draws, search_epsilon in all, with Li et
al.'s bound; the draws only see the sample). Two departures from ARX, both for the
certificate: ARX releases the pivot of best exact score (``trackOptimum`` of its
``DataDependentEDDPAlgorithm``), an argmax over the sample's scores made outside any
mechanism, which one record can change, so its release is not covered by the composition
above (veil draws it, with half the search budget: on ARX's own Adult sample, at
ARX's k and budget, the median score of 12 searches is within 1-6% of the score of ARX's
output with 100 steps, 2-11% with 10 steps, and 7-22% below for ``"classes"``); and a
pivot is never drawn twice (ARX may draw a node again when it is a specialization of a
later pivot).

Scores (higher is better; n the number of input records, m of quasi-identifiers, P of
published sampled records: those in classes of at least k; a record not sampled or
suppressed counts as removed; ARX's ``getScore`` of each metric, with the paper's
divisors). Each bound D below holds for one record added (or removed): the other
records keep their sample coins, so the class of the new record, if it is sampled, is
the only class that changes, from s to s + 1 records:

* ``"loss"`` (granularity, ARX's loss): ``-(sum_j sum_published share_j + m (n - P)) /
  (m max(k - 1, 1))``, share_j in [0, 1] the share of attribute j's hierarchy rows that
  the published value stands for (ARX's loss metric). D = m max(k - 1, 1): the record
  adds at most m when removed or published; when it lifts its class to k, the k - 1
  removed records (m each) become k published ones (in [0, m] each): a change in
  [-(k - 1) m, m].
* ``"precision"``: the same with ``share_j = level_j / height_j`` (Sweeney's precision);
  the same D.
* ``"discernibility"``: ``-(n (n - P) + sum_published classes |E|^2) / (n D)``,
  ``D = k^2 / (k - 1) + 1`` (5 for k = 1), at least the sensitivity ``max(k, 2)`` of
  ``f = (n - P) + sum |E|^2 / n``: a removed record adds 1 and shrinks the sum's share by
  ``sum |E|^2 / (n (n + 1)) < 1``; a class reaching k trades k - 1 removed records for
  ``k^2 / (n + 1) <= k``; a record joining a published class of s adds
  ``(2 s + 1) / (n + 1) < 2``.
* ``"entropy"`` (ARX's score for non-uniform entropy): per attribute the discernibility
  of the published values, ``n`` for a removed record or one generalized to the
  hierarchy's root, the sum of squared counts of the other published values, averaged
  over attributes and divided by ``n D``; per attribute a class reaching k adds at most
  ``(2 c k + k^2) / (n + 1) <= 2 k`` (c + k <= n + 1 records) and removes k - 1, so its
  sensitivity is at most k + 1 <= D (2 <= 5 for k = 1).
* ``"classes"`` (ARX's score for AECS): the number of published classes, plus one if any
  record is removed (they form one class); D = 1: a record creates, publishes or joins
  at most one class, and a class reaching k leaves one removed record at least (k >= 2)
  or publishes a new class (k = 1).

Neighbour relation: **add/remove one record** (unbounded DP); tables of any size. The
output is the multiset of generalized kept records (sorted: row order carries nothing of
the input's); its number of rows is part of the mechanism's output, covered by the
guarantee. Every released column is generalized and
counts in the classes; the input's other columns are not released (a raw column would be
a quasi-identifier left out of the classes, outside the proof).

Cost: charged to a :class:`veil.dp.Ledger` once, before anything is sampled, as the event
``ComposedDpEvent([binary randomized response at epsilon, PoissonSampledDpEvent(delta,
NonPrivateDpEvent())])``, whose privacy profile is exactly that of an (epsilon,
delta)-DP mechanism's worst case (Kairouz, Oh & Viswanath 2015): ``delta(e') = delta +
(1 - delta) max(0, e^epsilon - e^e') / (1 + e^epsilon)``; ``epsilon`` is the total
(search included), as ARX's.

Conformance: :meth:`SafePub.release` is the release path; black-box tests run it, with
fixed levels and with the search, on neighbouring tables (one record added or removed)
with ``rng=None`` and check the (epsilon, delta) pair above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd
from dp_accounting import dp_event as de
from scipy import stats

from veil._validation import check_choice, check_delta, check_epsilon, check_int
from veil.anon.encoding import classify
from veil.anon.hierarchy import Hierarchy
from veil.anon.metrics import class_ids
from veil.dp import Exponential, Ledger
from veil.dp.samplers import noisy_argmax
from veil.errors import ConfigError, DataError
from veil.random import Generator, RngLike, check_rng

__all__ = ["METRICS", "SafePub", "SafePubRelease", "safepub_k"]

#: the number of Chernoff-bounded terms scanned at once
_CHUNK = 4096
#: the search's score functions (module docstring)
METRICS = ("loss", "precision", "discernibility", "entropy", "classes")


def _gamma(epsilon: float, beta: float) -> float:
    power = math.exp(epsilon)
    return (power - 1 + beta) / power


def _delta_of(k: int, beta: float, gamma: float) -> float:
    """``d(k)`` of the module docstring."""
    rate = gamma * math.log(gamma / beta) - (gamma - beta)
    start = max(math.ceil(k / gamma - 1 - 1e-12), 1)
    best = 0.0
    while True:
        n = np.arange(start, start + _CHUNK, dtype=np.float64)
        tail = stats.binom.sf(np.floor(n * gamma * (1 - 1e-15)), n, beta)
        chernoff = np.exp(-n * rate)
        running = np.maximum.accumulate(np.maximum(tail, best))
        done = np.flatnonzero(running >= chernoff)
        if done.size:
            return float(running[done[0]])
        best = float(running[-1])
        start += _CHUNK


def safepub_k(epsilon: float, delta: float) -> tuple[float, int]:
    """``(beta, k)``: the sampling probability and the smallest class size that make the
    release (epsilon, delta)-DP."""
    beta = -math.expm1(-epsilon)
    gamma = _gamma(epsilon, beta)
    lo, hi = 1, 1
    while _delta_of(hi, beta, gamma) > delta:        # d(k) decreases in k
        lo, hi = hi + 1, hi * 2
        if hi > 1 << 24:
            raise ConfigError(f"delta={delta!r} is not allowed with epsilon={epsilon!r}: it "
                              "needs classes of more than 16 million records")
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if _delta_of(mid, beta, gamma) > delta else (lo, mid)
    return beta, lo


def _down(value: Fraction) -> float:
    """The largest double <= ``value`` (> 0): budgets split so that the parts never add
    up to more than the whole."""
    x = float(value)
    while Fraction(x) > value:
        x = math.nextafter(x, 0.0)
    return x


class _Scores:
    """The search's scores of transformations on the sample (module docstring)."""

    def __init__(self, positions: list[np.ndarray], hierarchies: list[Hierarchy],
                 sampled: np.ndarray, n: int, k: int, metric: str) -> None:
        self.n, self.k, self.metric = n, k, metric
        self.m = len(hierarchies)
        self.heights = [h.height for h in hierarchies]
        self.codes, self.sizes, self.shares, self.root = [], [], [], []
        for pos, h in zip(positions, hierarchies):
            rows = pos[sampled]
            top = h.labels(h.height).astype(str)
            root = top[0] if np.all(top == top[0]) else None
            codes, sizes, shares, roots = [], [], [], []
            for level in range(h.n_levels):
                labels, up, counts = np.unique(h.labels(level).astype(str),
                                               return_inverse=True, return_counts=True)
                codes.append(up.ravel()[rows])
                sizes.append(labels.size)
                shares.append(counts / len(h))
                roots.append(labels == root)
            self.codes.append(codes)
            self.sizes.append(sizes)
            self.shares.append(shares)
            self.root.append(roots)
        self.divisor = 5.0 if k == 1 else k * k / (k - 1) + 1.0

    def __call__(self, levels: tuple[int, ...]) -> float:
        n, m, k = self.n, self.m, self.k
        codes = np.stack([c[lv] for c, lv in zip(self.codes, levels)], axis=1)
        if codes.shape[0]:
            inverse, _ = classify(codes, np.array([s[lv] for s, lv in zip(self.sizes, levels)],
                                                  dtype=np.int64))
            counts = np.bincount(inverse)
        else:
            inverse, counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        published = counts[inverse] >= k
        kept = int(published.sum())
        if self.metric == "classes":
            return float(np.sum(counts >= k) + (kept < n))
        if self.metric in ("loss", "precision"):
            if self.metric == "loss":
                total = sum(float(self.shares[j][lv][codes[published, j]].sum())
                            for j, lv in enumerate(levels))
            else:
                total = kept * sum(lv / h for lv, h in zip(levels, self.heights) if h)
            return -(total + m * (n - kept)) / (m * max(k - 1, 1))
        if n == 0:
            return 0.0
        if self.metric == "discernibility":
            big = counts[counts >= k].astype(np.float64)
            return -(n * (n - kept) + float(big @ big)) / (n * self.divisor)
        total = 0.0                                          # entropy
        for j, lv in enumerate(levels):
            values = codes[published, j]
            values = values[~self.root[j][lv][values]]
            c = np.bincount(values).astype(np.float64)
            total += n * (n - values.size) + float(c @ c)
        return -total / (n * m * self.divisor)


@dataclass(frozen=True)
class SafePubRelease:
    """A SafePub release: the generalized kept records and its certificate."""

    table: pd.DataFrame
    epsilon: float
    delta: float
    beta: float
    k: int
    levels: dict[str, int]
    neighbours: str
    simulation: bool
    search_epsilon: float = 0.0
    steps: int = 0
    metric: str | None = None

    @property
    def certificate(self) -> dict[str, object]:
        searched = self.metric is not None
        return {"mechanism": "SafePub (sampling + " + (
                    f"generalization searched by the exponential mechanism ({self.metric}, "
                    f"{self.steps} steps)" if searched else "data-independent generalization")
                + " + k-suppression)", "epsilon": self.epsilon, "delta": self.delta,
                "search_epsilon": self.search_epsilon, "beta": self.beta, "k": self.k,
                "levels": dict(self.levels), "neighbours": self.neighbours,
                "certified": not self.simulation}


class SafePub:
    """(epsilon, delta)-DP anonymization by sampling and generalization (module docstring).

    ``epsilon``: the total budget. ``levels``: the generalization level of each
    quasi-identifier, fixed without looking at the data (no search); or None: SafePub's
    search chooses them with ``search_epsilon`` of the budget (default a tenth),
    ``steps`` steps and the score ``metric`` (one of :data:`METRICS`).
    """

    neighbours = "add/remove one record"

    def __init__(self, epsilon: float, delta: float, *, levels: Mapping[str, int] | None = None,
                 search_epsilon: float | None = None, steps: int = 100,
                 metric: str = "loss") -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if self.delta <= 0:
            raise ConfigError(f"delta={delta!r} is not allowed: SafePub needs delta > 0")
        if levels is not None:
            if not isinstance(levels, Mapping) or not levels:
                raise ConfigError(f"levels={levels!r} is not allowed: pass {{column: level}} "
                                  "for every quasi-identifier, or None to search")
            if search_epsilon is not None:
                raise ConfigError(f"search_epsilon={search_epsilon!r} is not allowed with "
                                  "levels: the caller's levels need no search")
            levels = {str(c): check_int(v, f"levels[{c!r}]", low=0) for c, v in levels.items()}
            search = 0.0
        else:
            search = (self.epsilon / 10 if search_epsilon is None
                      else check_epsilon(search_epsilon, "search_epsilon"))
            if search >= self.epsilon:
                raise ConfigError(f"search_epsilon={search_epsilon!r} is not allowed: it must "
                                  f"be below epsilon={epsilon!r}")
        self.levels = levels
        self.search_epsilon = search
        self.steps = check_int(steps, "steps", low=1)
        self.metric = check_choice(metric, "metric", METRICS)
        self.epsilon_anon = (_down(Fraction(self.epsilon) - Fraction(search)) if search
                             else self.epsilon)
        self.beta, self.k = safepub_k(self.epsilon_anon, self.delta)

    @property
    def event(self) -> de.DpEvent:
        """The (epsilon, delta) worst case as a dp_accounting event (module docstring)."""
        return de.ComposedDpEvent([
            de.RandomizedResponseDpEvent(noise_parameter=2.0 / (math.exp(self.epsilon) + 1.0),
                                         num_buckets=2),
            de.PoissonSampledDpEvent(self.delta, de.NonPrivateDpEvent())])

    def release(self, table: pd.DataFrame, hierarchies: Mapping[str, Hierarchy], *,
                ledger: Ledger, rng: RngLike = None, label: str | None = None) -> SafePubRelease:
        """Charge ``ledger``, then sample, search (without ``levels``), generalize and
        suppress ``table``."""
        if not isinstance(table, pd.DataFrame):
            raise DataError(f"the table must be a pandas DataFrame, got {type(table).__name__}")
        if not isinstance(ledger, Ledger):
            raise ConfigError(f"ledger={ledger!r} is not allowed: pass a veil.dp.Ledger")
        if not hierarchies or (self.levels is not None and set(hierarchies) != set(self.levels)):
            raise ConfigError(f"hierarchies for {sorted(hierarchies)} do not match levels for "
                              f"{sorted(self.levels or ())}: give one per quasi-identifier")
        for col, h in hierarchies.items():
            if col not in table.columns:
                raise DataError(f"column {col!r} is not in the table (columns: "
                                f"{list(table.columns)})")
            if not isinstance(h, Hierarchy):
                raise ConfigError(f"hierarchies[{col!r}] is not a Hierarchy")
            if self.levels is not None and self.levels[col] >= h.n_levels:
                raise ConfigError(f"levels[{col!r}]={self.levels[col]} is not allowed: its "
                                  f"hierarchy has levels 0..{h.n_levels - 1}")
        columns = list(hierarchies)
        positions = [hierarchies[c].positions(table[c], c) for c in columns]
        generator = check_rng(rng)
        ledger.charge(self.event, label=label or "SafePub", delta=self.delta)
        sampled = np.flatnonzero(generator.random(len(table)) < self.beta)
        if self.levels is None:
            scores = _Scores(positions, [hierarchies[c] for c in columns], sampled,
                             len(table), self.k, self.metric)
            chosen = dict(zip(columns, self._search(scores, generator)))
        else:
            chosen = dict(self.levels)
        released = pd.DataFrame({c: hierarchies[c].labels(chosen[c])[pos[sampled]].astype(str)
                                 for c, pos in zip(columns, positions)})
        if len(released):
            ids, sizes = class_ids(released, columns)
            # a multiset: sorted, so that the rows' order tells nothing of the input's
            released = released[sizes[ids] >= self.k].sort_values(
                columns, kind="stable").reset_index(drop=True)
        searched = self.levels is None
        return SafePubRelease(released, self.epsilon, self.delta, self.beta, self.k, chosen,
                              self.neighbours, simulation=generator.seeded,
                              search_epsilon=self.search_epsilon,
                              steps=self.steps if searched else 0,
                              metric=self.metric if searched else None)

    def _search(self, scores: _Scores, rng: Generator) -> tuple[int, ...]:
        """SafePub's walk down the lattice from its top (module docstring)."""
        walk = Exponential(_down(Fraction(self.search_epsilon) / (2 * self.steps))).coef
        final = Exponential(_down(Fraction(self.search_epsilon) / 2)).coef
        pivot = tuple(scores.heights)
        score = {pivot: scores(pivot)}
        pivots, candidates = [pivot], set()
        for _ in range(self.steps):
            for j in range(len(pivot)):
                if pivot[j]:
                    below = pivot[:j] + (pivot[j] - 1,) + pivot[j + 1:]
                    if below not in score:
                        score[below] = scores(below)
                        candidates.add(below)
            if not candidates:
                break
            ordered = sorted(candidates)          # a fixed order: seeded runs repeat
            pivot = ordered[noisy_argmax([score[g] for g in ordered], coef=walk, rng=rng)]
            candidates.discard(pivot)
            pivots.append(pivot)
        return pivots[noisy_argmax([score[g] for g in pivots], coef=final, rng=rng)]

    def __repr__(self) -> str:
        if self.levels is not None:
            return f"SafePub({self.epsilon}, {self.delta}, levels={self.levels})"
        return (f"SafePub({self.epsilon}, {self.delta}, search_epsilon={self.search_epsilon}, "
                f"steps={self.steps}, metric={self.metric!r})")
