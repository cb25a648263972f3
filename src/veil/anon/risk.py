"""Re-identification risk of a table, and the privacy models that bound it.

Risk analysis (El Emam 2013, *Guide to the De-Identification of Personal Health
Information*; ARX's risk estimators), for the classes of records equal in every
quasi-identifier (records suppressed to ``*`` in every quasi-identifier are left out,
as ARX does), f_E the size of class E in the sample of n records:

* **prosecutor** (the attacker knows the target is in the table): a record's risk is
  ``1 / f_E``: the highest, the average ``classes / n`` and the share of records above a
  threshold (:func:`veil.anon.metrics.risk_from_sizes`);
* **journalist** (the target is somewhere in the population): ``1 / F_E`` with F_E the
  size of the class in a population table; without one, F_E >= f_E and the prosecutor
  figures bound it (so they are reported);
* **marketer** (re-identify as many as possible): the expected share re-identified,
  ``sum_E f_E / F_E / n`` (``classes / n`` without a population table);
* **sample uniqueness**: the share of records alone in their class;
* **population uniqueness**: the estimated share of the population that is unique
  (:mod:`veil.anon.population`: Dankar, Pitman, Zayatz or SNB).

Privacy models on the whole table (ARX's ``RiskBasedCriterion``): the table satisfies
them or not, from its class-size distribution. Classes are suppressed, smallest first
(ties broken by the objective's :meth:`~veil.anon.metrics.Objective.class_order`,
then by first record), as few as ARX's binary search finds
(:func:`enforce`), within the suppression limit.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from veil._validation import check_choice
from veil.anon.metrics import SUPPRESSED, class_ids, risk_from_sizes
from veil.anon.models import PrivacyModel
from veil.anon.population import POPULATION_MODELS, population_uniques
from veil.errors import ConfigError, DataError

__all__ = ["AverageReidentificationRisk", "PopulationUniqueness", "RiskAnalysis",
           "SampleModel", "SampleUniqueness", "analyze_risk", "enforce"]


def _threshold(value: float, name: str = "threshold") -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ConfigError(f"{name}={value!r} is not allowed: must be a number in [0, 1]")
    return float(value)


def _population(value, name: str = "population_size") -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ConfigError(f"{name}={value!r} is not allowed: must be a positive number of "
                          "people")
    return float(value)


class SampleModel(PrivacyModel):
    """A model of the whole table: every class passes on its own, the table's class sizes
    (the kept classes, the completely generalized one left out) must be ``fulfilled``."""

    sample_based = True

    def satisfied(self, counts, hist, domain):
        return np.ones(counts.shape[0], dtype=bool)

    def fulfilled(self, sizes: np.ndarray) -> bool:
        raise NotImplementedError


class AverageReidentificationRisk(SampleModel):
    """The average prosecutor risk, ``classes / records``, is at most ``threshold``.
    Suppressing the smallest classes only lowers it: monotone (as ARX declares)."""

    monotone_with_suppression = True

    def __init__(self, threshold: float) -> None:
        self.threshold = _threshold(threshold)

    def fulfilled(self, sizes):
        return sizes.size == 0 or sizes.size / sizes.sum() <= self.threshold

    def __repr__(self) -> str:
        return f"AverageReidentificationRisk({self.threshold})"

    def __str__(self) -> str:
        return f"average re-identification risk <= {self.threshold:g}"


class SampleUniqueness(SampleModel):
    """The share of records alone in their class is at most ``threshold``."""

    monotone_with_suppression = True

    def __init__(self, threshold: float) -> None:
        self.threshold = _threshold(threshold)

    def fulfilled(self, sizes):
        return sizes.size == 0 or float((sizes == 1).sum() / sizes.sum()) <= self.threshold

    def __repr__(self) -> str:
        return f"SampleUniqueness({self.threshold})"

    def __str__(self) -> str:
        return f"sample uniqueness <= {self.threshold:g}"


class PopulationUniqueness(SampleModel):
    """The estimated share of population uniques (``model``: ``"dankar"``, ``"pitman"``,
    ``"zayatz"`` or ``"snb"``, :mod:`veil.anon.population`) is at most ``threshold``,
    in a population of ``population_size``. As in ARX, a table with records alone in
    their class whose estimate fails (no solution) does not satisfy it. Declared monotone
    under generalization for Zayatz only, and never under suppression (ARX's
    declaration)."""

    monotone_with_suppression = False

    def __init__(self, threshold: float, model: str = "dankar", *,
                 population_size: float) -> None:
        self.threshold = _threshold(threshold)
        self.model = check_choice(model, "model", POPULATION_MODELS)
        self.population_size = _population(population_size)
        self.monotone = model == "zayatz"

    def fulfilled(self, sizes):
        if sizes.size == 0:
            return True
        share = population_uniques(sizes, self.population_size, self.model) \
            / self.population_size
        return 0 < share <= self.threshold or (share == 0 and not (sizes == 1).any())

    def __repr__(self) -> str:
        return (f"PopulationUniqueness({self.threshold}, {self.model!r}, "
                f"population_size={self.population_size:g})")

    def __str__(self) -> str:
        return f"population uniqueness ({self.model}) <= {self.threshold:g}"


def _search(model: SampleModel, sizes: np.ndarray, base: int, limit: int) -> list[int]:
    """ARX's binary search over how many of the ordered classes (``sizes``) to suppress
    (``base`` records are suppressed already): the positions it suppresses."""
    cum = np.r_[0, np.cumsum(sizes)]

    def state(m: int) -> str:
        ok = model.fulfilled(sizes[m:])
        if not ok and base + cum[m] > limit:
            return "abort"
        return "ok" if ok else "no"

    low, high = 0, sizes.size - 1
    mid = (low + high) // 2
    m = mid + 1
    current = "abort"
    while low <= high:
        current = state(m)
        if current == "abort":
            break
        if current == "ok":
            high = mid - 1
            mid = (low + high) // 2
            m = min(m, mid + 1)
        else:
            low = mid + 1
            mid = (low + high) // 2
            m = max(m, mid + 1)
    gone = list(range(m))
    if current != "abort" and state(m) == "no" and m <= mid + 1 < sizes.size:
        gone.append(mid + 1)                    # ARX's last step: one class more
    return gone


def _at(positions: list[int], entries: np.ndarray, sizes: np.ndarray,
        tie_order: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The classes at ``positions`` of the suppression order, ``entries`` being in order
    of size (``sizes``) already: ``tie_order`` orders the classes of a size only where
    ``positions`` take some of them and not all (which ones they are depends on it)."""
    entries = entries.copy()
    cut = np.asarray(positions, dtype=np.int64)
    for size in np.unique(sizes[cut]):
        lo, hi = np.searchsorted(sizes, size), np.searchsorted(sizes, size, side="right")
        if np.count_nonzero((cut >= lo) & (cut < hi)) < hi - lo:
            entries[lo:hi] = entries[lo:hi][tie_order(entries[lo:hi])]
    return entries[cut]


def enforce(models: Sequence[SampleModel], counts: np.ndarray, kept: np.ndarray,
            eligible: np.ndarray, tie_order: Callable[[np.ndarray], np.ndarray],
            limit: int) -> np.ndarray:
    """Suppress classes until every model is fulfilled: ARX's binary search over the
    number of classes suppressed in order (kept and ``eligible`` classes only: not the
    completely generalized one), stopped once more than ``limit`` records are
    suppressed. The order is by size, then ``tie_order(rows)`` (a permutation of
    ``rows``, classes of one size); the models see only sizes, so ties are ordered only
    where the suppressed classes take part of a size. Returns the new ``kept``."""
    kept = kept.copy()
    base = int(counts.sum(where=~kept & eligible))
    for model in models:
        entries = np.flatnonzero(kept & eligible)
        sizes = counts[entries]
        if sizes.size and sizes.max() <= np.iinfo(np.uint16).max:
            sizes = sizes.astype(np.uint16)          # numpy's stable sort: a radix sort
        entries = entries[np.argsort(sizes, kind="stable")]
        sizes = counts[entries]
        if entries.size == 0 or model.fulfilled(sizes):
            continue
        gone = _at(_search(model, sizes, base, limit), entries, sizes, tie_order)
        kept[gone] = False
        base += int(counts[gone].sum())
    return kept


@dataclass(frozen=True)
class RiskAnalysis:
    """Re-identification risks of a table (see the module docstring)."""

    records: int
    classes: int
    threshold: float
    prosecutor_highest: float
    prosecutor_average: float
    prosecutor_at_risk: float
    journalist_highest: float
    journalist_average: float
    marketer: float
    sample_uniqueness: float
    population_uniqueness: float | None
    population_model: str | None

    def as_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)


def analyze_risk(table: pd.DataFrame, quasi_identifiers: Sequence[str], *,
                 threshold: float = 0.2, population_size: float | None = None,
                 population: pd.DataFrame | None = None,
                 model: str = "dankar") -> RiskAnalysis:
    """Prosecutor, journalist and marketer risk, sample and population uniqueness.

    ``population_size``: the number of people the table was sampled from (for
    population uniqueness); ``population``: a population table holding the
    quasi-identifiers, generalized like ``table`` (for journalist and marketer risk).
    A table whose records are all ``*`` discloses nothing through them: every risk is 0.
    """
    qis = list(quasi_identifiers)
    if not qis:
        raise ConfigError("quasi_identifiers is empty: name at least one column")
    check_choice(model, "model", POPULATION_MODELS)
    if population_size is not None:
        _population(population_size)
    ids, sizes = class_ids(table, qis)
    gone = np.logical_and.reduce([table[c].astype(str).to_numpy() == SUPPRESSED
                                  for c in qis])
    keep = np.ones(sizes.size, dtype=bool)
    keep[np.unique(ids[gone])] = False
    sizes = sizes[keep]
    if sizes.size == 0:          # all '*': the quasi-identifiers disclose nothing
        return RiskAnalysis(0, 0, float(threshold), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                            None if population_size is None else 0.0,
                            None if population_size is None else model)
    n = int(sizes.sum())
    prosecutor = risk_from_sizes(sizes, threshold)
    journalist_highest, journalist_average = prosecutor.highest, prosecutor.average
    marketer = sizes.size / n
    if population is not None:
        missing = [c for c in qis if c not in population.columns]
        if missing:
            raise DataError(f"column {missing[0]!r} is not in the population table")
        if len(population) < len(table):
            raise DataError(f"the population table holds {len(population)} records, fewer "
                            f"than the table's {len(table)}")
        both = pd.concat([table.loc[~gone, qis], population[qis]], ignore_index=True)
        pid, _ = class_ids(both.astype(str), qis)
        sample_ids, pop_ids = pid[:n], pid[n:]
        big = np.bincount(pop_ids, minlength=pid.max() + 1).astype(np.float64)
        if np.any(big[sample_ids] == 0):
            raise DataError("a class of the table has no record in the population table: "
                            "the population must contain the sample")
        per_record = 1.0 / big[sample_ids]
        journalist_highest = float(per_record.max())
        journalist_average = float(per_record.mean())
        marketer = journalist_average
    uniques = None
    if population_size is not None:
        uniques = population_uniques(sizes, population_size, model) / float(population_size)
    return RiskAnalysis(
        records=n, classes=int(sizes.size), threshold=float(threshold),
        prosecutor_highest=prosecutor.highest, prosecutor_average=prosecutor.average,
        prosecutor_at_risk=prosecutor.records_at_risk,
        journalist_highest=journalist_highest, journalist_average=journalist_average,
        marketer=float(marketer), sample_uniqueness=float((sizes == 1).sum() / n),
        population_uniqueness=uniques, population_model=model if uniques is not None else None)
