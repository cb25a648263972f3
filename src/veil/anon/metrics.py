"""Utility and risk metrics of anonymized tables, and the objectives of the optimal search.

Utility (lower is better unless said):

* **non-uniform entropy** (ARX's definition; de Waal & Willenborg 1999; Gionis & Tassa
  2009): for every quasi-identifier j,
  ``NUE_j = sum over records of -log2( a(x) / b(g) )`` where x is the record's original
  value, g its generalized value, a(x) the number of records with value x and b(g) the
  number with generalized value g. For a full-domain generalization this is the
  conditional entropy H(original | released) in bits, summed over records. Suppressed
  records (ARX's non-monotonic variant) add ``-sum_g c(g) log2(c(g)/s)`` over the s
  suppressed records, c(g) of which had generalized value g; ARX's monotonic variant
  (``monotonic=True``, its ``createEntropyMetric(true)``) charges them nothing beyond
  their generalized value, as if kept. Like ARX, each attribute's
  value is truncated to 10 decimals and NUE is the sum over attributes.
* **DM\\*** (discernibility; Bayardo & Agrawal 2005, as in ARX): ``sum over classes of
  |E|^2`` over kept classes plus ``n`` for each suppressed record; the monotonic variant
  (``monotonic=True``) is ``sum over all classes of |E|^2``, suppressed ones included.
* **AECS** (LeFevre et al. 2006): n / number of classes, the suppressed records counted as
  one class (they share the all-``*`` tuple).
* **loss** (Iyengar 2002's LM, called NCP by Xu et al. 2006): the mean over cells of
  ``(max - min) / (column max - column min)`` of the original values a released numeric
  value stands for, or ``(v - 1) / (V - 1)`` for a categorical one that stands for v of
  the column's V values; ``*`` costs 1. In [0, 1].
* **ARX's loss** (``arx_loss``, ARX's ``createLossMetric()``): per attribute, the share of
  its hierarchy's rows each released value stands for (1 for a suppressed record),
  summed over records and normalized to [0, 1]; the geometric mean over attributes
  (``_ArxLoss`` states it).
* **precision** (Sweeney 2002): ``1 - mean over cells of level / height``, suppressed
  cells at full height; higher is better, 1 for the original table.
* **information loss** of microaggregation (Domingo-Ferrer & Mateo-Sanz 2002):
  ``IL = 100 * SSE / SST``.

Risk (prosecutor model, El Emam 2008): a record in a class of size f is re-identified with
probability 1/f; the table's highest risk is 1/min f, its average ``classes / n``, and the
records at risk are the share with 1/f above a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from veil.anon.encoding import ClassTable, EncodedTable
from veil.anon.hierarchy import value_keys
from veil.errors import ConfigError, DataError

__all__ = [
    "MONOTONIC_VARIANTS", "OBJECTIVES", "RiskReport", "average_class_size", "class_ids",
    "class_sizes", "discernibility", "generalization_loss", "information_loss",
    "nonuniform_entropy", "reidentification_risk", "risk_from_sizes",
]

_LOG2 = math.log(2.0)
SUPPRESSED = "*"


def _truncate(value: float) -> float:
    """Keep 10 decimals (ARX compares and reports information loss this way)."""
    return math.floor(value * 1e10) / 1e10


# -- class structure of a released table ----------------------------------------------
def class_ids(table: pd.DataFrame, columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Class index of every row (rows with equal values in ``columns``) and class sizes."""
    if len(table) == 0:
        raise DataError("the table is empty; expected at least one record")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise DataError(f"column {missing[0]!r} is not in the table (columns: "
                        f"{list(table.columns)})")
    key = np.zeros(len(table), dtype=np.int64)
    for c in columns:
        codes, uniques = pd.factorize(table[c])
        key = key * (len(uniques) + 1) + codes + 1
        key = pd.factorize(key)[0].astype(np.int64)
    ids, sizes = np.unique(key, return_inverse=True, return_counts=True)[1:]
    return ids.ravel(), sizes


def class_sizes(table: pd.DataFrame, quasi_identifiers: Sequence[str]) -> np.ndarray:
    """Sizes of the equivalence classes of a table."""
    return class_ids(table, list(quasi_identifiers))[1]


def _suppressed_rows(table: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    return np.logical_and.reduce([table[c].astype(str).to_numpy() == SUPPRESSED
                                  for c in columns])


def discernibility(table: pd.DataFrame, quasi_identifiers: Sequence[str]) -> int:
    """DM*: sum of squared class sizes; a suppressed record (all QIs ``*``) costs n."""
    qis = list(quasi_identifiers)
    ids, sizes = class_ids(table, qis)
    suppressed = _suppressed_rows(table, qis)
    kept = np.ones(sizes.size, dtype=bool)
    kept[np.unique(ids[suppressed])] = False
    return int(np.sum(sizes[kept].astype(np.int64) ** 2) + suppressed.sum() * len(table))


def average_class_size(table: pd.DataFrame, quasi_identifiers: Sequence[str]) -> float:
    """AECS: records per equivalence class."""
    sizes = class_sizes(table, quasi_identifiers)
    return float(sizes.sum() / sizes.size)


@dataclass(frozen=True)
class RiskReport:
    """Prosecutor re-identification risk."""

    highest: float
    average: float
    records_at_risk: float
    threshold: float


def risk_from_sizes(sizes: np.ndarray, threshold: float = 0.2) -> RiskReport:
    """Prosecutor risk from class sizes (each record's risk is 1 / its class size)."""
    if not 0 < threshold <= 1:
        raise ConfigError(f"threshold={threshold!r} is not allowed: must be in (0, 1]")
    sizes = np.asarray(sizes, dtype=np.float64)
    n = sizes.sum()
    at_risk = sizes[1.0 / sizes > threshold].sum()
    return RiskReport(float(1.0 / sizes.min()), float(sizes.size / n), float(at_risk / n),
                      float(threshold))


def reidentification_risk(table: pd.DataFrame, quasi_identifiers: Sequence[str],
                          threshold: float = 0.2) -> RiskReport:
    """Prosecutor risk of a released table: highest, average and share above ``threshold``."""
    return risk_from_sizes(class_sizes(table, quasi_identifiers), threshold)


def _numeric(values) -> np.ndarray | None:
    """The values as floats, or None when one of them is not a number."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return x if np.all(np.isfinite(x)) else None


def _pair_counts(original: pd.Series, released: pd.Series):
    x, _ = pd.factorize(pd.Series(value_keys(original)))
    g, g_labels = pd.factorize(released.astype(str))
    return x, g, g_labels


def nonuniform_entropy(original: pd.DataFrame, released: pd.DataFrame,
                       quasi_identifiers: Sequence[str]) -> float:
    """Non-uniform entropy (bits) of releasing ``released`` for ``original``, row-aligned.

    ``sum_j sum_records -log2( n(x, g) / n(g) )`` with n(x, g) the records whose original
    value is x and released value g: ARX's non-uniform entropy for a full-domain
    generalization without suppression (then n(x, g) = a(x)), and its natural extension
    (conditional entropy) to local recodings such as Mondrian's.
    """
    _check_aligned(original, released)
    total = 0.0
    for col in quasi_identifiers:
        x, g, _ = _pair_counts(original[col], released[col])
        pair, pair_counts = np.unique(g.astype(np.int64) * (x.max() + 1) + x,
                                      return_counts=True)
        g_counts = np.bincount(g)
        ratio = pair_counts / g_counts[pair // (x.max() + 1)]
        total += _truncate(-float(np.sum(pair_counts * np.log(ratio))) / _LOG2)
    return total


def _check_aligned(original: pd.DataFrame, released: pd.DataFrame) -> None:
    if len(original) != len(released):
        raise DataError(f"original ({len(original)} rows) and released ({len(released)} "
                        "rows) tables must be row-aligned")


def _coverage_loss(x_codes: np.ndarray, g_codes: np.ndarray, n_groups: int,
                   numeric: np.ndarray | None) -> np.ndarray:
    """Loss of each released value g: numeric range or distinct count it stands for."""
    if numeric is not None:
        span = numeric.max() - numeric.min()
        if span == 0:
            return np.zeros(n_groups)
        lo = np.full(n_groups, np.inf)
        hi = np.full(n_groups, -np.inf)
        np.minimum.at(lo, g_codes, numeric)
        np.maximum.at(hi, g_codes, numeric)
        return (hi - lo) / span
    domain = int(x_codes.max()) + 1
    if domain == 1:
        return np.zeros(n_groups)
    pairs = np.unique(g_codes.astype(np.int64) * domain + x_codes)
    distinct = np.bincount(pairs // domain, minlength=n_groups)
    return (distinct - 1) / (domain - 1)


def generalization_loss(original: pd.DataFrame, released: pd.DataFrame,
                        quasi_identifiers: Sequence[str]) -> float:
    """Iyengar's loss metric (NCP) of ``released`` against the row-aligned ``original``."""
    qis = list(quasi_identifiers)
    _check_aligned(original, released)
    total = 0.0
    for col in qis:
        x, g, labels = _pair_counts(original[col], released[col])
        loss = _coverage_loss(x, g, len(labels), _numeric(original[col]))
        loss[np.asarray(labels) == SUPPRESSED] = 1.0
        total += loss[g].sum()
    return float(total / (len(original) * len(qis)))


def information_loss(values: np.ndarray, groups: np.ndarray) -> float:
    """``100 * SSE / SST`` of replacing each row by its group's centroid."""
    x = np.asarray(values, dtype=np.float64)
    x = x.reshape(len(x), -1)
    sst = float(((x - x.mean(axis=0)) ** 2).sum())
    if sst == 0:
        return 0.0
    counts = np.bincount(groups)
    means = np.stack([np.bincount(groups, weights=x[:, d]) / counts
                      for d in range(x.shape[1])], axis=1)
    sse = float(((x - means[groups]) ** 2).sum())
    return 100.0 * sse / sst


# -- objectives of the optimal search --------------------------------------------------
#: metrics with ARX's monotonic variant under suppression (``monotonic=True``)
MONOTONIC_VARIANTS = ("entropy", "discernibility")


class Objective:
    """A utility metric for the lattice search over an encoded table (lower is better).

    ``loss`` is the exact value of a transformation given its classes and which of them
    are kept. The search prunes with three lower bounds, each proved below for its metric:

    * ``column_bounds[j][l]``: attribute j's additive share at level l when nothing is
      suppressed (None when the metric is not additive over attributes); their sum is the
      exact loss without suppression and a lower bound with it.
    * ``static_bounds(nodes, k, s)``: a lower bound of each node's loss from the lattice
      alone (k the largest k-anonymity required, s the records that may be suppressed).
    * ``lift_bound(table, k)``: from a checked node's classes (kept or not), a lower bound
      of the loss of every anonymous generalization of it, the node included; None when
      it adds nothing to the static bounds.
    * ``suppression_bound(table, gone)``: the classes ``gone`` fail k-anonymity (or
      another model monotone under suppression) at a checked node, so their records are
      suppressed at every specialization of it too (a specialization splits them into
      smaller classes); this bounds from below what they add to the static bound there
      (``suppression_floor``: the loss itself, from their number alone).

    ``monotone(s)``: the loss never decreases from an anonymous node to an anonymous
    generalization of it, so that a checked node's loss bounds everything above it. Every
    objective is monotone without suppression (s = 0); with suppression only the
    monotonic variants are (``monotonic=True``: a suppressed record costs what it would
    cost kept in its class, ARX's monotonic metrics).
    """

    name = ""
    column_bounds: list[np.ndarray] | None = None

    def __init__(self, enc: EncodedTable, *, monotonic: bool = False) -> None:
        if monotonic and self.name not in MONOTONIC_VARIANTS:
            raise ConfigError(f"monotonic=True is not allowed with metric={self.name!r}: "
                              f"only {' and '.join(map(repr, MONOTONIC_VARIANTS))} have a "
                              "monotonic variant")
        self.enc = enc
        self.monotonic = monotonic

    def monotone(self, max_suppressed: int) -> bool:
        return max_suppressed == 0 or self.monotonic

    def static_bounds(self, nodes: np.ndarray, k: int, max_suppressed: int) -> np.ndarray:
        if self.column_bounds is None:
            return np.zeros(len(nodes))
        return sum(b[nodes[:, j]] for j, b in enumerate(self.column_bounds))

    def lift_bound(self, table: ClassTable, k: int) -> float | None:
        return None

    def suppression_bound(self, table: ClassTable, gone: np.ndarray) -> float:
        """A lower bound of what suppressing (at least) the records of the classes ``gone``
        adds to the static bound, at this node and every specialization of it."""
        return 0.0

    def suppression_floor(self, suppressed: int, k: int) -> float:
        """A lower bound of the loss of an anonymous node that suppresses at least
        ``suppressed`` records."""
        return 0.0

    def loss(self, levels: np.ndarray, table: ClassTable, kept: np.ndarray) -> float:
        raise NotImplementedError

    def class_order(self, levels: np.ndarray, table: ClassTable,
                    rows: np.ndarray) -> np.ndarray | None:
        """A loss per class (of the classes ``rows``) that orders classes of equal size
        for suppression (ARX orders them by the metric's loss of the class alone, except
        for metrics where that loss is the class size); None: by size, then first
        record."""
        return None


class _Entropy(Objective):
    """Non-uniform entropy. With suppression (non-monotonic) the suppressed records add
    their entropy within the suppressed set, which is >= 0: the no-suppression value,
    monotone under generalization, is a lower bound everywhere (``column_bounds``).

    Suppression bound: attribute j's added term is ``F(c) = sum_g c_g log2(s / c_g)``
    over the suppressed records' values g (s = sum c). F never decreases when records are
    added (dF/dc_g = log2(s / c_g) >= 0) nor when values are split into finer ones
    (grouping never increases entropy). A specialization suppresses a superset of the
    records suppressed for k-anonymity here, at finer or equal levels, so F of those
    records at this node's levels bounds its term from below (less a 1e-10 per attribute
    for the 10-decimal truncation).
    """

    name = "entropy"

    def __init__(self, enc, *, monotonic=False):
        super().__init__(enc, monotonic=monotonic)
        self._g = []
        for col in enc.columns:
            a = col.counts[0].astype(np.float64)
            self._g.append([-float(np.sum(a * np.log(a / col.counts[level][col.lift(0, level)])))
                            / _LOG2 for level in range(col.height + 1)])
        self.column_bounds = [np.array([_truncate(v) for v in g]) for g in self._g]
        # code offsets that make the codes of all attributes (at any level) distinct, and
        # the end of the last
        self._offsets = np.cumsum([0] + [int(c.sizes[0]) for c in enc.columns])

    def _suppressed_terms(self, table: ClassTable, gone: np.ndarray) -> np.ndarray:
        """``F_j = sum_g c_g log2(s / c_g)`` of the records of classes ``gone``, for every
        attribute j at once (one bincount over the attributes' offset codes)."""
        q = len(self.enc.columns)
        c_rows = table.counts[gone].astype(np.float64)
        s = float(c_rows.sum())
        if s == 0:
            return np.zeros(q)
        c = np.bincount((table.codes[gone] + self._offsets[:-1]).ravel(),
                        weights=np.repeat(c_rows, q), minlength=self._offsets[-1])
        clogc = c * np.log(np.where(c > 0, c, 1.0))
        return (s * math.log(s) - np.add.reduceat(clogc, self._offsets[:-1])) / _LOG2

    def loss(self, levels, table, kept):
        values = [self._g[j][level] for j, level in enumerate(levels)]
        if not self.monotonic and not kept.all():
            values = np.asarray(values) + self._suppressed_terms(table, ~kept)
        return float(sum(_truncate(v) for v in values))

    def suppression_bound(self, table, gone):
        if self.monotonic:
            return 0.0
        terms = self._suppressed_terms(table, gone)
        return max(float(terms.sum()) - len(terms) * 1e-10, 0.0)


class _Precision(Objective):
    """1 - Sweeney's precision (so that lower is better)."""

    name = "precision"

    def __init__(self, enc, *, monotonic=False):
        super().__init__(enc, monotonic=monotonic)
        q = len(enc.columns)
        self.column_bounds = [np.arange(h + 1) / max(h, 1) / q for h in enc.heights]

    def loss(self, levels, table, kept):
        s = table.counts[~kept].sum() / self.enc.n
        share = np.asarray(levels) / np.maximum(self.enc.heights, 1)
        return float(np.sum((1 - s) * share + s) / len(share))


class _Loss(Objective):
    name = "loss"

    def __init__(self, enc, *, monotonic=False):
        super().__init__(enc, monotonic=monotonic)
        self._lm: list[list[np.ndarray]] = []
        self._base: list[np.ndarray] = []
        for col in enc.columns:
            # coverage is computed on the (few) original values, each present in the data
            values = np.arange(col.sizes[0])
            numeric = _numeric(col.labels[0])
            per_level = [_coverage_loss(values, col.lift(0, level), int(col.sizes[level]),
                                        numeric) for level in range(col.height + 1)]
            self._lm.append(per_level)
            self._base.append(np.array([counts @ lm for counts, lm in zip(col.counts,
                                                                          per_level)]))
        scale = enc.n * len(enc.columns)
        self.column_bounds = [b / scale for b in self._base]

    def loss(self, levels, table, kept):
        gone = ~kept
        total = 0.0
        for j, level in enumerate(levels):
            lm = self._lm[j][level]
            total += self._base[j][level] + table.counts[gone] @ (1 - lm[table.codes[gone, j]])
        return float(total / (self.enc.n * len(self.enc.columns)))


class _Discernibility(Objective):
    """DM*: ``sum over kept classes of |E|^2 + n * suppressed`` (non-monotonic, ARX's
    ``MetricSDNMDiscernability``), or ``sum over all classes of |E|^2`` (monotonic, ARX's
    ``MetricSDDiscernability``).

    Bounds, for k the k-anonymity required and at most s suppressed records:

    * lift: a class of size c at node X lies inside one class of any generalization Y;
      at an anonymous Y each of its records is either kept, in a class of size
      C >= max(c, k) (C >= c since Y's class contains X's, C >= k since it is kept), or
      suppressed at cost n >= max(c, k). So ``loss(Y) >= sum over X's classes of
      c * max(c, k)`` (for the monotonic variant the exact ``sum c^2``, monotone).
    * static: a node has at most Q = prod_j |labels of attribute j at its level| classes;
      keeping n - t records (t <= s) in at most Q classes costs at least
      ``f(t) = (n - t)^2 / Q + n t`` (Cauchy-Schwarz), a convex function of t whose
      minimum on [0, s] is at t* = clip(n - n Q / 2, 0, s) (t* = 0 when Q >= 2); and every
      record costs at least k (kept classes hold k, a suppressed record n >= k). So
      ``loss >= max(n k, f(t*))``; the monotonic variant's ``sum c^2 >= max(n, n^2 / Q)``.
    * suppression floor: a node that suppresses t records keeps n - t in classes of at
      least k: ``loss >= k (n - t) + n t = n k + (n - k) t``.
    """

    name = "discernibility"

    def static_bounds(self, nodes, k, max_suppressed):
        n = float(self.enc.n)
        q = np.ones(len(nodes))
        for j, col in enumerate(self.enc.columns):
            q *= col.sizes.astype(np.float64)[nodes[:, j]]
        if self.monotonic:
            return np.maximum(n * n / q, n)
        t = np.clip(n - n * q / 2, 0.0, float(max_suppressed))    # f's minimum on [0, s]
        return np.maximum((n - t) ** 2 / q + n * t, n * k)

    def lift_bound(self, table, k):
        c = table.counts.astype(np.float64)
        return float(c @ (c if self.monotonic else np.maximum(c, k)))

    def suppression_floor(self, suppressed, k):
        if self.monotonic:
            return 0.0
        return float(self.enc.n * k + (self.enc.n - k) * suppressed)

    def loss(self, levels, table, kept):
        c = table.counts
        if self.monotonic:
            return float(np.sum(c.astype(np.float64) ** 2))
        return float(np.sum(c[kept] ** 2) + c[~kept].sum() * self.enc.n)


class _AECS(Objective):
    """n / (kept classes + 1 if any record is suppressed). A generalization Y of a
    checked node X has at most as many classes, and its kept classes plus the (non-empty)
    class of suppressed records are at most all of them: ``aecs(Y) >= n / classes(X)``."""

    name = "aecs"

    def static_bounds(self, nodes, k, max_suppressed):
        return np.ones(len(nodes))

    def lift_bound(self, table, k):
        return self.enc.n / len(table)

    def loss(self, levels, table, kept):
        return self.enc.n / (int(kept.sum()) + (0 if kept.all() else 1))


class _ArxLoss(Objective):
    """ARX's loss metric (``Metric.createLossMetric()``, ``MetricMDNMLoss`` with its
    defaults: generalization and suppression weighted equally, geometric mean).

    A value g of attribute j at some level stands for the share ``s(g)`` of the rows of
    its hierarchy that generalize to g (1/|H_j| at level 0, 1 for ``*``). Attribute j's
    loss sums ``|E| s(g_E)`` over kept classes and 1 per suppressed record, normalized:
    ``L_j = max(0, (sum - n/|H_j|) / (n - n/|H_j|))``, truncated to 10 decimals; the
    table's loss is the geometric mean ``prod_j (1 + L_j)^(1/q) - 1`` (q attributes).

    Bounds: suppressing a record raises its term from s <= 1 to 1, and the geometric mean
    grows with every L_j, so the geometric mean of the no-suppression values (monotone
    under generalization: shares only grow) bounds every node's loss from below.
    ``class_order``: ARX orders classes of equal size for suppression by this loss of
    the class alone (``|E| s(g)`` per attribute, geometric mean).
    """

    name = "arx_loss"

    def __init__(self, enc, *, monotonic=False):
        super().__init__(enc, monotonic=monotonic)
        self._shares: list[list[np.ndarray]] = []
        self._plain: list[np.ndarray] = []
        for col in enc.columns:
            h = col.hierarchy
            per_level = []
            for level in range(col.height + 1):
                names, counts = np.unique(h.labels(level).astype(str), return_counts=True)
                share = dict(zip(names.tolist(), (counts / len(h)).tolist()))
                per_level.append(np.array([share[str(v)] for v in col.labels[level]]))
            self._shares.append(per_level)
            self._plain.append(np.array([self._normalize(float(c @ s), len(h))
                                         for c, s in zip(col.counts, per_level)]))

    def _normalize(self, total: float, size: int) -> float:
        low = self.enc.n / size
        span = self.enc.n - low
        return _truncate(max((total - low) / span, 0.0)) if span > 0 else 0.0

    @staticmethod
    def _mean(values: np.ndarray) -> np.ndarray:
        """Geometric mean of ``1 + L_j`` minus 1 over the last axis."""
        q = values.shape[-1]
        return np.prod((values + 1.0) ** (1.0 / q), axis=-1) - 1.0

    def static_bounds(self, nodes, k, max_suppressed):
        return self._mean(np.stack([b[nodes[:, j]] for j, b in enumerate(self._plain)],
                                   axis=1))

    def loss(self, levels, table, kept):
        if kept.all():
            return float(self._mean(np.array([p[lv] for p, lv in zip(self._plain, levels)])))
        rows = np.flatnonzero(kept)
        counts = table.counts[rows].astype(np.float64)
        gone = float(table.counts.sum() - counts.sum())
        values = [self._normalize(float(counts @ self._shares[j][level][table.codes[rows, j]])
                                  + gone, len(self.enc.columns[j].hierarchy))
                  for j, level in enumerate(levels)]
        return float(self._mean(np.array(values)))

    def class_order(self, levels, table, rows):
        counts = table.counts[rows]
        return self._mean(np.stack([counts * self._shares[j][level][table.codes[rows, j]]
                                    for j, level in enumerate(levels)], axis=1))


#: objective name -> class
OBJECTIVES = {cls.name: cls for cls in (_Entropy, _Discernibility, _AECS, _Loss, _Precision,
                                        _ArxLoss)}
