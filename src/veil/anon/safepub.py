"""(epsilon, delta)-differentially private publishing by random sampling + generalization.

The mechanism of SafePub (Bild, Kuhn & Prasser, PoPETs 2018), after Li, Qardaji & Su
(ASIACCS 2012), with a data-independent generalization (ARX's ``EDDifferentialPrivacy``
with a fixed generalization scheme):

1. every record is kept independently with probability ``beta = 1 - exp(-epsilon)``
   (from :mod:`veil.random`'s CSPRNG; a seeded ``rng`` is a labelled simulation whose
   epsilon is not certified);
2. each quasi-identifier is generalized to the level the caller fixed in advance
   (``levels``: never chosen from the data);
3. the classes of fewer than k records are removed, k the smallest integer with
   ``d(k) <= delta``.

Guarantee (Li et al. 2012, Theorem 5; the bound SafePub computes): the release is
(epsilon, delta)-DP for any ``epsilon >= -ln(1 - beta)`` with
``d(k) = max_{n >= n_m} sum_{j > gamma n} Binomial(j; n, beta)``,
``gamma = (e^epsilon - 1 + beta) / e^epsilon`` and ``n_m = ceil(k / gamma - 1)``; the
maximum is taken until the Chernoff bound ``exp(-n (gamma ln(gamma / beta) - (gamma -
beta)))`` of the remaining terms falls below it (as ARX does; floors taken downwards,
which only adds protection).

Neighbour relation: **add/remove one record** (unbounded DP); tables of any size. The
output is the multiset of generalized kept records (sorted: row order carries nothing of
the input's); its number of rows is part of the mechanism's output, covered by the
guarantee. Every released column is generalized and
counts in the classes; the input's other columns are not released (a raw column would be
a quasi-identifier left out of the classes, outside the proof).

Cost: charged to a :class:`veil.dp.Ledger` before anything is sampled, as the event
``ComposedDpEvent([binary randomized response at epsilon, PoissonSampledDpEvent(delta,
NonPrivateDpEvent())])``, whose privacy profile is exactly that of an (epsilon,
delta)-DP mechanism's worst case (Kairouz, Oh & Viswanath 2015): ``delta(e') = delta +
(1 - delta) max(0, e^epsilon - e^e') / (1 + e^epsilon)``.

Not done here: SafePub's data-dependent search (the exponential mechanism over the
lattice with part of the budget); the levels are the caller's.

Conformance: :meth:`SafePub.release` is the release path; a black-box test runs it on
neighbouring tables (one record added or removed) with ``rng=None`` and checks the
(epsilon, delta) pair above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
from dp_accounting import dp_event as de
from scipy import stats

from veil._validation import check_delta, check_epsilon, check_int
from veil.anon.hierarchy import Hierarchy
from veil.anon.metrics import class_ids
from veil.dp import Ledger
from veil.errors import ConfigError, DataError
from veil.random import RngLike, check_rng

__all__ = ["SafePub", "SafePubRelease", "safepub_k"]

#: the number of Chernoff-bounded terms scanned at once
_CHUNK = 4096


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

    @property
    def certificate(self) -> dict[str, object]:
        return {"mechanism": "SafePub (sampling + data-independent generalization + "
                             "k-suppression)", "epsilon": self.epsilon, "delta": self.delta,
                "beta": self.beta, "k": self.k, "levels": dict(self.levels),
                "neighbours": self.neighbours,
                "certified": not self.simulation}


class SafePub:
    """(epsilon, delta)-DP anonymization by sampling and generalization (module docstring).

    ``levels``: the generalization level of each quasi-identifier, fixed without looking
    at the data.
    """

    neighbours = "add/remove one record"

    def __init__(self, epsilon: float, delta: float, *, levels: Mapping[str, int]) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if self.delta <= 0:
            raise ConfigError(f"delta={delta!r} is not allowed: SafePub needs delta > 0")
        if not isinstance(levels, Mapping) or not levels:
            raise ConfigError(f"levels={levels!r} is not allowed: pass {{column: level}} for "
                              "every quasi-identifier")
        self.levels = {str(c): check_int(v, f"levels[{c!r}]", low=0) for c, v in levels.items()}
        self.beta, self.k = safepub_k(self.epsilon, self.delta)

    @property
    def event(self) -> de.DpEvent:
        """The (epsilon, delta) worst case as a dp_accounting event (module docstring)."""
        return de.ComposedDpEvent([
            de.RandomizedResponseDpEvent(noise_parameter=2.0 / (math.exp(self.epsilon) + 1.0),
                                         num_buckets=2),
            de.PoissonSampledDpEvent(self.delta, de.NonPrivateDpEvent())])

    def release(self, table: pd.DataFrame, hierarchies: Mapping[str, Hierarchy], *,
                ledger: Ledger, rng: RngLike = None, label: str | None = None) -> SafePubRelease:
        """Charge ``ledger``, then sample, generalize and suppress ``table``."""
        if not isinstance(table, pd.DataFrame):
            raise DataError(f"the table must be a pandas DataFrame, got {type(table).__name__}")
        if not isinstance(ledger, Ledger):
            raise ConfigError(f"ledger={ledger!r} is not allowed: pass a veil.dp.Ledger")
        if set(hierarchies) != set(self.levels):
            raise ConfigError(f"hierarchies for {sorted(hierarchies)} do not match levels for "
                              f"{sorted(self.levels)}: give one per quasi-identifier")
        for col, h in hierarchies.items():
            if col not in table.columns:
                raise DataError(f"column {col!r} is not in the table (columns: "
                                f"{list(table.columns)})")
            if not isinstance(h, Hierarchy):
                raise ConfigError(f"hierarchies[{col!r}] is not a Hierarchy")
            if self.levels[col] >= h.n_levels:
                raise ConfigError(f"levels[{col!r}]={self.levels[col]} is not allowed: its "
                                  f"hierarchy has levels 0..{h.n_levels - 1}")
        generator = check_rng(rng)
        generalized = {c: h.generalize(table[c], self.levels[c]) for c, h in hierarchies.items()}
        ledger.charge(self.event, label=label or "SafePub", delta=self.delta)
        kept = generator.random(len(table)) < self.beta
        released = pd.DataFrame({c: np.asarray(v, dtype=object)[kept]
                                 for c, v in generalized.items()})
        if len(released):
            ids, sizes = class_ids(released, list(hierarchies))
            # a multiset: sorted, so that the rows' order tells nothing of the input's
            released = released[sizes[ids] >= self.k].astype(str).sort_values(
                list(hierarchies), kind="stable").reset_index(drop=True)
        return SafePubRelease(released, self.epsilon, self.delta, self.beta, self.k,
                              dict(self.levels), self.neighbours,
                              simulation=generator.seeded)

    def __repr__(self) -> str:
        return f"SafePub({self.epsilon}, {self.delta}, levels={self.levels})"
