"""Differentially private statistics of one column: count, sum, mean, variance, histogram,
quantile.

Every function:

* takes the data as a numpy array, a pandas Series or a list (one value per record);
  neighbouring datasets differ by one record added or removed;
* uses *declared* bounds, never bounds read from the data. Values outside them are clipped
  into them and counted: the count is in ``Result.clipped`` (an exact diagnostic for the
  curator, not a private value) and a warning, without counts, is logged;
* releases through ``ledger`` (a :class:`~veil.dp.Ledger`); with ``ledger=None`` a one-off
  ledger holding exactly this call's budget is used, so the cost is still recorded. A
  statistic made of several releases checks that all of them fit before the first;
* raises ConfigError / DataError for bad input (epsilon <= 0, delta outside [0, 1),
  reversed bounds, NaN/inf or non-numeric data, empty data) before anything is charged;
* uses the Laplace mechanism when ``delta == 0`` and the (analytic) Gaussian mechanism when
  ``delta > 0``, both floating-point safe. A statistic that needs several releases splits
  (epsilon, delta) in powers of two, so the parts add up exactly.

Sums are exact (:func:`veil.dp.sensitivity.grid_sum`): their sensitivity is exactly the
one the noise is calibrated to. The mean is a noisy sum over a noisy count; the variance
uses noisy sums of ``x - m`` and ``(x - m)^2`` around the bounds' midpoint m; quantiles use
the exponential mechanism over a grid of the declared range (Smith 2011).
"""

from __future__ import annotations

import builtins
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from dp_accounting import dp_event as de

from veil._validation import (
    check_array,
    check_bounds,
    check_categories,
    check_delta,
    check_epsilon,
    check_int,
    check_probability,
)
from veil.dp.gaussian import Gaussian
from veil.dp.laplace import Laplace
from veil.dp.ledger import Ledger, open_ledger
from veil.dp.mechanism import Mechanism
from veil.dp.result import Result
from veil.dp.selection import Exponential
from veil.dp.sensitivity import clip_values, grid_sum
from veil.errors import BudgetExceededError, ConfigError, DataError
from veil.random import RngLike, check_rng

__all__ = ["count", "sum", "mean", "variance", "histogram", "quantile"]

logger = logging.getLogger(__name__)


# -- shared steps --------------------------------------------------------------------

def _numeric(data: Any) -> np.ndarray:
    """The data as a 1-D float array (DataError for NaN/inf, non-numeric or empty data)."""
    if isinstance(data, pd.DataFrame):
        raise DataError("data is a DataFrame; pass one column (a Series)")
    if isinstance(data, pd.Series):
        try:
            data = data.to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError):
            raise DataError(f"column {data.name!r} is not numeric "
                            f"(dtype {data.dtype})") from None
    return check_array(data, "data", ndim=1)


def _clip(values: np.ndarray, bounds: tuple[float, float], query: str) -> tuple[np.ndarray, int]:
    clipped, outside = clip_values(values, bounds, name="data")
    if outside:
        # no counts in the log: n and the count are private (the count is in the result)
        logger.warning("%s: values outside the declared bounds [%g, %g] were clipped into "
                       "them (count in Result.clipped, for the curator)", query, *bounds)
    return clipped, outside


def _privacy(epsilon: Any, delta: Any) -> tuple[float, float]:
    return check_epsilon(epsilon), check_delta(delta)


def _mechanism(epsilon: float, delta: float, sensitivity: float) -> Mechanism:
    if delta == 0.0:
        return Laplace(epsilon, 0.0, sensitivity)
    return Gaussian(epsilon, delta, sensitivity)


def _release(parts: list[tuple[str, Mechanism, Any]], ledger: Ledger | None, label: str | None,
             rng: RngLike) -> list[Any]:
    """Release each (name, mechanism, value) through the ledger after checking that the
    values are valid and that all the parts fit the budget together."""
    for _, mechanism, value in parts:
        mechanism.check(value)
    eps = builtins.sum(m.epsilon for _, m, _ in parts)
    delta = builtins.sum(m.delta for _, m, _ in parts)
    ledger = open_ledger(ledger, eps, delta)
    if len(parts) > 1:
        composed = de.ComposedDpEvent([m.event for _, m, _ in parts])
        if not ledger.fits(composed, delta=delta or None):
            left, at = ledger.remaining()
            raise BudgetExceededError(
                f"{label or 'this statistic'} needs epsilon {eps:g} (delta {delta:g}, "
                f"{len(parts)} releases) but {left:.2g} of the ledger's budget epsilon="
                f"{ledger.epsilon:g} remains (at delta={at:g}); nothing was charged")
    rng = check_rng(rng)
    return [ledger.release(mechanism, value, label=f"{label}:{name}" if name else label,
                           rng=rng)
            for name, mechanism, value in parts]


def _split(epsilon: float, delta: float, *weights: float) -> list[tuple[float, float]]:
    """Budget parts (weights are powers of two summing to 1, so the parts add up exactly)."""
    return [(epsilon * w, delta * w) for w in weights]


def _result(value: Any, parts: list[tuple[str, Mechanism, Any]], clipped: int, query: str,
            **details: Any) -> Result:
    eps = builtins.sum(m.epsilon for _, m, _ in parts)
    delta = builtins.sum(m.delta for _, m, _ in parts)
    mechanisms = "; ".join(f"{name}: {m!r}" if name else repr(m) for name, m, _ in parts)
    return Result(value, eps, delta, clipped, query, mechanisms, details)


# -- the statistics ----------------------------------------------------------------------

def count(data: Any, *, epsilon: float, delta: float = 0.0, ledger: Ledger | None = None,
          label: str | None = None, rng: RngLike = None) -> Result:
    """The number of records (sensitivity 1), rounded to an integer >= 0."""
    epsilon, delta = _privacy(epsilon, delta)
    n = _labels(data).size if _is_labels(data) else _numeric(data).size
    parts = [("", _mechanism(epsilon, delta, 1.0), float(n))]
    (noisy,) = _release(parts, ledger, label or "count", rng)
    return _result(max(0, round(noisy)), parts, 0, "count")


def sum(data: Any, *, bounds: Any, epsilon: float, delta: float = 0.0,
        ledger: Ledger | None = None, label: str | None = None, rng: RngLike = None) -> Result:
    """The sum of the values clipped into ``bounds`` (sensitivity max(|lo|, |hi|))."""
    epsilon, delta = _privacy(epsilon, delta)
    bounds = check_bounds(bounds)
    values, clipped = _clip(_numeric(data), bounds, "sum")
    total, sensitivity, _ = grid_sum(values, bounds)
    parts = [("", _mechanism(epsilon, delta, sensitivity), total)]
    (noisy,) = _release(parts, ledger, label or "sum", rng)
    return _result(noisy, parts, clipped, "sum")


def mean(data: Any, *, bounds: Any, epsilon: float, delta: float = 0.0,
         ledger: Ledger | None = None,
         label: str | None = None, rng: RngLike = None) -> Result:
    """The mean: a noisy sum over a noisy count (half the budget each), clipped to bounds."""
    epsilon, delta = _privacy(epsilon, delta)
    bounds = check_bounds(bounds)
    values, clipped = _clip(_numeric(data), bounds, "mean")
    total, sensitivity, _ = grid_sum(values, bounds)
    (e1, d1), (e2, d2) = _split(epsilon, delta, 0.5, 0.5)
    parts = [("count", _mechanism(e1, d1, 1.0), float(values.size)),
             ("sum", _mechanism(e2, d2, sensitivity), total)]
    n, s = _release(parts, ledger, label or "mean", rng)
    value = float(np.clip(s / builtins.max(n, 1.0), *bounds))
    return _result(value, parts, clipped, "mean")


def variance(data: Any, *, bounds: Any, epsilon: float, delta: float = 0.0,
             ledger: Ledger | None = None, label: str | None = None, rng: RngLike = None) -> Result:
    """The (population) variance from noisy count, sum and sum of squares of ``x - m``
    (m the bounds' midpoint; budget 1/4, 1/4, 1/2), clipped to ``[0, (hi - lo)^2 / 4]``."""
    epsilon, delta = _privacy(epsilon, delta)
    lo, hi = bounds = check_bounds(bounds)
    values, clipped = _clip(_numeric(data), bounds, "variance")
    mid = (lo + hi) / 2.0
    y_bounds = (lo - mid, hi - mid)
    half = builtins.max(abs(y_bounds[0]), abs(y_bounds[1]))
    if not math.isfinite(half * half):
        raise ConfigError(f"bounds={bounds!r} is not allowed for a variance: the squared "
                          "half-width overflows a float")
    s1, sens1, _ = grid_sum(values - mid, y_bounds)
    s2, sens2, _ = grid_sum((values - mid) ** 2, (0.0, half * half))
    (e1, d1), (e2, d2), (e3, d3) = _split(epsilon, delta, 0.25, 0.25, 0.5)
    parts = [("count", _mechanism(e1, d1, 1.0), float(values.size)),
             ("sum", _mechanism(e2, d2, sens1), s1),
             ("sum of squares", _mechanism(e3, d3, sens2), s2)]
    n, t1, t2 = _release(parts, ledger, label or "variance", rng)
    n = builtins.max(n, 1.0)
    value = float(np.clip(t2 / n - (t1 / n) ** 2, 0.0, (hi - lo) ** 2 / 4.0))
    return _result(value, parts, clipped, "variance")


def _is_labels(data: Any) -> bool:
    arr = data.to_numpy() if isinstance(data, pd.Series) else np.asarray(data)
    return arr.dtype.kind in "OUSb" or isinstance(getattr(data, "dtype", None),
                                                   pd.CategoricalDtype)


def _labels(data: Any) -> np.ndarray:
    arr = data.to_numpy(dtype=object) if isinstance(data, pd.Series) else np.asarray(data,
                                                                                     dtype=object)
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(f"data has shape {arr.shape}; expected a non-empty column of values")
    if any(v is None or (isinstance(v, float) and np.isnan(v)) for v in arr):
        raise DataError("data holds missing values (None/NaN); clean or impute them first")
    return arr


def histogram(data: Any, bins: Any = None, *, categories: Sequence[Any] | None = None,
              epsilon: float, delta: float = 0.0, ledger: Ledger | None = None,
              label: str | None = None,
              rng: RngLike = None) -> Result:
    """Counts per bin (sensitivity 1 under add/remove: a record is in one bin), rounded to
    integers >= 0.

    Numeric data: ``bins`` is an increasing sequence of edges (numpy's convention, the last
    bin closed); values outside ``[edges[0], edges[-1]]`` are clipped into the end bins.
    Categorical data: ``categories`` lists the declared categories; values outside them are
    counted as clipped and left out. The value is an int array (numeric; edges in
    ``details``) or a dict category -> count.
    """
    epsilon, delta = _privacy(epsilon, delta)
    if (bins is None) == (categories is None):
        raise ConfigError("histogram needs exactly one of bins= (numeric edges) or "
                          "categories= (declared categories)")
    if categories is not None:
        cats = list(check_categories(categories))
        labels = _labels(data)
        codes = pd.Index(cats).get_indexer(labels)
        clipped = int(np.count_nonzero(codes < 0))
        if clipped:
            logger.warning("histogram: values outside the declared categories were left out "
                           "(count in Result.clipped, for the curator)")
        counts = np.bincount(codes[codes >= 0], minlength=len(cats)).astype(np.float64)
        details: dict[str, Any] = {"categories": cats}
    else:
        edges = check_array(bins, "bins", ndim=1)
        if edges.size < 2 or not np.all(np.diff(edges) > 0):
            raise ConfigError(f"bins={bins!r} is not allowed: need at least 2 strictly "
                              "increasing edges")
        values, clipped = _clip(_numeric(data), (float(edges[0]), float(edges[-1])),
                                "histogram")
        counts = np.histogram(values, edges)[0].astype(np.float64)
        details = {"edges": edges.tolist()}
    parts = [("", _mechanism(epsilon, delta, 1.0), counts)]
    (noisy,) = _release(parts, ledger, label or "histogram", rng)
    rounded = np.maximum(0, np.rint(noisy)).astype(np.int64)
    value = (dict(zip(details["categories"], rounded.tolist())) if categories is not None
             else rounded)
    return _result(value, parts, clipped, "histogram", **details)


def quantile_candidates(points: np.ndarray, counts: np.ndarray, g: int,
                        q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exponential mechanism's candidate groups for the q-quantile on the grid
    ``0..g``, from the data's grid indices ``points`` (sorted, distinct) and their
    ``counts``: ``(starts, sizes, utilities)`` of the gaps between data points and the
    points themselves (see :func:`quantile`). Adding or removing r records moves every
    utility by at most r."""
    le = np.cumsum(counts)
    lt = le - counts
    target = q * float(le[-1] if le.size else 0)

    def utility(below: np.ndarray, upto: np.ndarray) -> np.ndarray:
        return -np.maximum(np.maximum(below - target, target - upto), 0.0)

    # groups: the gap before each data point, the data point itself, and the final gap
    gap_start = np.concatenate(([0], points + 1))
    gap_size = np.concatenate((points, [g + 1])) - gap_start
    gap_rank = np.concatenate(([0], le)).astype(np.float64)
    starts = np.concatenate((gap_start, points))
    sizes = np.concatenate((gap_size, np.ones(points.size, dtype=np.int64)))
    utilities = np.concatenate((utility(gap_rank, gap_rank),
                                utility(lt.astype(np.float64), le.astype(np.float64))))
    keep = sizes > 0
    return starts[keep], sizes[keep], utilities[keep]


def quantile_point(starts: np.ndarray, sizes: np.ndarray, group: int,
                   bounds: tuple[float, float], g: int, rng: Any) -> float:
    """The grid point released for the chosen candidate group: uniform inside it."""
    lo, hi = bounds
    j = int(starts[group]) + (int(rng.integers(0, int(sizes[group]))) if sizes[group] > 1
                              else 0)
    return float(builtins.min(lo + j * ((hi - lo) / g), hi))


def quantile(data: Any, q: float, *, bounds: Any, epsilon: float, ledger: Ledger | None = None,
             label: str | None = None, rng: RngLike = None, resolution: int = 2 ** 20) -> Result:
    """The q-quantile by the exponential mechanism over a grid of the declared range.

    Candidates are the ``resolution + 1`` points ``lo + j (hi - lo) / resolution``. With the
    data mapped to grid indices, candidate j has utility ``-dist(q n, [#{x < j}, #{x <= j}])``
    (0 exactly when j is a q-quantile); adding or removing a record moves it by at most 1,
    so candidates are chosen with probability proportional to ``exp(epsilon u / 2)``
    (Smith 2011, on a grid). Candidates between data points share a utility and are drawn
    as one group weighted by its size, then uniformly inside it. Pure epsilon-DP.
    """
    epsilon = check_epsilon(epsilon)
    q = check_probability(q, "q")
    lo, hi = bounds = check_bounds(bounds)
    g = check_int(resolution, "resolution", low=1, high=2 ** 40)
    values, clipped = _clip(_numeric(data), bounds, "quantile")
    step = (hi - lo) / g
    idx = np.clip(np.floor((values - lo) / step), 0, g).astype(np.int64)
    points, counts = np.unique(idx, return_counts=True)
    starts, sizes, utilities = quantile_candidates(points, counts, g, q)
    mechanism = Exponential(epsilon, 1.0)
    parts = [("", mechanism, (utilities, sizes.astype(np.float64)))]
    rng = check_rng(rng)
    (group,) = _release(parts, ledger, label or f"quantile {q:g}", rng)
    value = quantile_point(starts, sizes, group, bounds, g, rng)
    return _result(value, parts, clipped, "quantile", q=q, resolution=g)
