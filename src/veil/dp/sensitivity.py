"""Sensitivity: global and local sensitivity, clipping, exact sums, sample-and-aggregate.

The sensitivity of a query ``f`` is the most ``f`` can change between neighbouring
datasets. veil's ledgers account add/remove-one neighbours (one record more or less);
replace-one neighbours (same size, one record changed) are given for reference.

Global sensitivities (values clipped to ``[lo, hi]``; Dwork & Roth 2014, Section 3.3):

=============  ======================  =====================================
query          add/remove one          replace one
=============  ======================  =====================================
count          1                       0 (the size does not change)
sum            max(|lo|, |hi|)         hi - lo
mean           (hi - lo) / (n + 1)     (hi - lo) / n
histogram      1 (L1 and L2)           2 (L1), sqrt(2) (L2)
=============  ======================  =====================================

For the mean, ``n`` is a public lower bound on the size of the smaller dataset (add/remove)
or the public size (replace one); veil's statistics avoid needing it by releasing a noisy
sum and a noisy count.

Local sensitivity (Nissim, Raskhodnikova & Smith 2007) is the change at *this* dataset;
for the median it can be far below the global ``hi - lo``. It depends on the data and is
not itself private: only its smooth upper bound (:func:`smooth_sensitivity_median`) may
calibrate noise.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from veil._validation import (
    check_array,
    check_bounds,
    check_choice,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
)
from veil.dp.ledger import Ledger
from veil.dp.result import Result
from veil.errors import ConfigError, DataError
from veil.random import RngLike, check_rng

__all__ = ["NEIGHBOURS", "global_sensitivity", "median_local_sensitivity",
           "smooth_sensitivity_median", "clip_values", "clip_l1", "clip_l2", "grid_sum", "sum_grid",
           "sample_and_aggregate"]

logger = logging.getLogger(__name__)

NEIGHBOURS = ("add_remove", "replace_one")
_EPS = 2.0 ** -53  # unit roundoff of doubles


def global_sensitivity(query: str, *, bounds: Any = None, neighbours: str = "add_remove",
                       n: int | None = None, norm: str = "l1") -> float:
    """The global sensitivity of ``count``, ``sum``, ``mean`` or ``histogram`` (table above).

    ``bounds`` are needed by sum and mean, ``n`` by mean, ``norm`` ("l1"/"l2") by the
    histogram under replace-one.
    """
    check_choice(query, "query", ("count", "sum", "mean", "histogram"))
    check_choice(neighbours, "neighbours", NEIGHBOURS)
    check_choice(norm, "norm", ("l1", "l2"))
    add_remove = neighbours == "add_remove"
    if query == "count":
        return 1.0 if add_remove else 0.0
    if query == "histogram":
        return 1.0 if add_remove else (2.0 if norm == "l1" else math.sqrt(2.0))
    if bounds is None:
        raise ConfigError(f"bounds=None is not allowed for query={query!r}: declare (lo, hi)")
    lo, hi = check_bounds(bounds)
    if query == "sum":
        return max(abs(lo), abs(hi)) if add_remove else hi - lo
    if n is None:
        raise ConfigError("n=None is not allowed for query='mean': give the public dataset "
                          "size (replace-one) or a lower bound on it (add/remove)")
    n = check_int(n, "n", low=1)
    return (hi - lo) / (n + 1) if add_remove else (hi - lo) / n


def _sorted_clipped(x: Any, bounds: Any) -> tuple[np.ndarray, float, float]:
    lo, hi = check_bounds(bounds)
    values = check_array(x, "x", ndim=1)
    return np.sort(np.clip(values, lo, hi)), lo, hi


def _median_spread(xs: np.ndarray, lo: float, hi: float, k: int) -> float:
    """A^(k) of Nissim, Raskhodnikova & Smith (2007, Sec. 3.1): the largest change of the
    median when k records are changed and then one more, ``max_t x[m+t] - x[m+t-k-1]``,
    with ``x[i] = lo`` below the data and ``hi`` above."""
    n = xs.size
    m = (n + 1) // 2  # 1-based index of the (lower) median
    t = np.arange(k + 2)
    padded = np.concatenate(([lo], xs, [hi]))

    def at(i: np.ndarray) -> np.ndarray:
        return padded[np.clip(i, 0, n + 1)]

    return float(np.max(at(m + t) - at(m + t - k - 1)))


def median_local_sensitivity(x: Any, bounds: Any, *, distance: int = 0) -> float:
    """Local sensitivity of the median at distance ``distance`` (replace-one neighbours).

    ``distance=0``: ``max(x[m+1] - x[m], x[m] - x[m-1])`` for the sorted, clipped data and
    the (lower) median index m. Not private: it is a function of the data.
    """
    xs, lo, hi = _sorted_clipped(x, bounds)
    return _median_spread(xs, lo, hi, check_int(distance, "distance", low=0))


def smooth_sensitivity_median(x: Any, bounds: Any, *, beta: float) -> float:
    """The beta-smooth sensitivity of the median, ``max_k exp(-k beta) A^(k)(x)``
    (Nissim, Raskhodnikova & Smith 2007, Prop. 3.4). A smooth upper bound on the local
    sensitivity, usable to calibrate noise (e.g. with their Cauchy or Laplace schemes)."""
    xs, lo, hi = _sorted_clipped(x, bounds)
    beta = check_positive(beta, "beta")
    best, k = 0.0, 0
    while math.exp(-k * beta) * (hi - lo) > best and k <= xs.size:
        best = max(best, math.exp(-k * beta) * _median_spread(xs, lo, hi, k))
        k += 1
    return best


def clip_values(x: Any, bounds: Any, *, name: str = "x") -> tuple[np.ndarray, int]:
    """Clip values into ``bounds``; returns ``(clipped, number clipped)``."""
    lo, hi = check_bounds(bounds)
    values = check_array(x, name)
    outside = int(np.count_nonzero((values < lo) | (values > hi)))
    return np.clip(values, lo, hi), outside


def _clip_rows(rows: Any, max_norm: float, order: int) -> tuple[np.ndarray, int]:
    max_norm = check_positive(max_norm, "max_norm")
    x = check_array(rows, "rows", ndim=(1, 2))
    single = x.ndim == 1
    x2 = x.reshape(1, -1) if single else x
    d = x2.shape[1]
    # The computed norm of d terms is within (d + 2) u of the exact one, and scaling adds
    # u per entry, so rows are scaled to norm <= target and the exact norm stays <= max_norm.
    target = max_norm / (1.0 + (2 * d + 8) * _EPS)
    norms = np.abs(x2).sum(axis=1) if order == 1 else np.sqrt(np.einsum("ij,ij->i", x2, x2))
    over = norms > target
    out = x2.copy()
    out[over] *= (target / norms[over])[:, None]
    return (out[0] if single else out), int(np.count_nonzero(over))


def clip_l2(rows: Any, max_norm: float) -> tuple[np.ndarray, int]:
    """Scale each row (a 2-D array's rows, or one 1-D vector) to L2 norm <= ``max_norm``.

    Returns ``(clipped, number of rows scaled)``. Scaling uses a margin of
    ``(2d + 8) 2^-53`` relative, so floating-point rounding never leaves a clipped row above
    ``max_norm``; rows within the margin of the bound count as clipped.
    """
    return _clip_rows(rows, max_norm, 2)


def clip_l1(rows: Any, max_norm: float) -> tuple[np.ndarray, int]:
    """Scale each row to L1 norm <= ``max_norm`` (as :func:`clip_l2`)."""
    return _clip_rows(rows, max_norm, 1)


def sum_grid(bounds: Any) -> tuple[float, int, int]:
    """The grid of an exact sum over ``bounds``: ``(q, k_lo, k_hi)`` with
    ``q = 2^(e - 23)`` (``2^(e-1) <= max(|lo|, |hi|) < 2^e``) and ``k = round(bound / q)``;
    a value in bounds rounds to an integer multiple of q in ``[k_lo, k_hi]`` (see
    :func:`grid_sum`)."""
    lo, hi = check_bounds(bounds)
    q = math.ldexp(1.0, math.frexp(max(abs(lo), abs(hi)))[1] - 23)
    return q, int(np.rint(lo / q)), int(np.rint(hi / q))


def grid_sum(values: Any, bounds: Any) -> tuple[float, float, float]:
    """An exact sum with exactly known sensitivity: ``(total, add/remove sensitivity,
    replace-one sensitivity)``.

    A floating-point sum's sensitivity exceeds the ideal one by rounding errors that grow
    with the (private) number of terms (Casacuberta, Shoemate, Vadhan & Wagaman 2022).
    Here each value is clipped into ``bounds`` and rounded to the grid
    ``q = 2^(e - 23)`` (``2^(e-1) <= max(|lo|, |hi|) < 2^e``, so a value moves by at most
    ``max|bound| 2^-23``); the integers ``round(v / q)`` are summed exactly. One record
    then changes the total by at most ``q max(|round(lo/q)|, |round(hi/q)|)`` (add/remove)
    or ``q (round(hi/q) - round(lo/q))`` (replace one), exactly. Up to 2^30 values.
    """
    lo, hi = check_bounds(bounds)
    v = np.clip(check_array(values, "values", allow_empty=True).ravel(), lo, hi)
    if v.size > 2 ** 30:
        raise DataError(f"{v.size} values are too many for an exact sum (at most 2^30); "
                        "split the data")
    q, k_lo, k_hi = sum_grid((lo, hi))
    k = np.rint(v / q).astype(np.int64)
    total = sum(int(k[i:i + 2 ** 22].sum()) for i in range(0, k.size, 2 ** 22))
    return q * total, q * max(abs(k_lo), abs(k_hi)), q * (k_hi - k_lo)


def _take(data: Any, idx: np.ndarray) -> Any:
    return data.iloc[idx] if hasattr(data, "iloc") else np.asarray(data)[idx]


def sample_and_aggregate(data: Any, estimator: Callable[[Any], Any], *, blocks: int,
                         bounds: Any, epsilon: float, delta: float = 0.0,
                         ledger: Ledger | None = None,
                         label: str | None = None, rng: RngLike = None) -> Result:
    """Sample-and-aggregate (Nissim, Raskhodnikova & Smith 2007; Smith 2011).

    Each record (row) joins one of ``blocks`` blocks uniformly at random, independently of
    the others; ``estimator`` (any function of a block returning a number or a vector of
    ``d`` numbers) runs on each block; the estimates are clipped into ``bounds`` (an empty
    block counts as the middle of the bounds) and their mean is released with Laplace noise
    (``delta=0``) or Gaussian noise. Adding or removing a record changes one block and so
    one estimate, by at most ``hi - lo`` per coordinate: the mean's sensitivity is
    ``d (hi - lo) / blocks`` (L1) or ``sqrt(d) (hi - lo) / blocks`` (L2), exactly (the
    sum is computed by :func:`grid_sum` and divided after the noise). The block
    assignment uses ``rng``; the release is charged through ``ledger``.
    """
    from veil.dp.gaussian import Gaussian
    from veil.dp.laplace import Laplace
    from veil.dp.ledger import Ledger

    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    lo, hi = check_bounds(bounds)
    k = check_int(blocks, "blocks", low=1)
    if not callable(estimator):
        raise ConfigError(f"estimator={estimator!r} is not allowed: expected a callable")
    n = len(data)
    if n == 0:
        raise DataError("data is empty; expected at least one record")
    rng = check_rng(rng)
    assign = rng.integers(0, k, n)
    estimates = []
    for b in range(k):
        idx = np.flatnonzero(assign == b)
        est = estimator(_take(data, idx)) if idx.size else (lo + hi) / 2.0
        # the messages name no estimate, block or shape: they are computed from the data
        try:
            est = np.asarray(est, dtype=np.float64)
        except (TypeError, ValueError):
            raise DataError("the estimator returned something other than numbers on a "
                            "block") from None
        if est.ndim > 1 or not np.all(np.isfinite(est)):
            raise DataError("the estimator returned a non-finite value or an array of more "
                            "than one dimension on a block: expected a finite number or a "
                            "vector")
        estimates.append(est)
    if len({e.shape for e in estimates}) != 1:
        raise DataError("the estimator returned estimates of different shapes on different "
                        "blocks: it must return the same shape on every block")
    stacked = np.stack(estimates)
    clipped, n_clipped = clip_values(stacked, (lo, hi), name="estimates")
    if n_clipped:  # the exact count is in the result, for the curator; not in the log
        logger.warning("sample-and-aggregate: block estimates outside [%g, %g] were clipped",
                       lo, hi)
    dims = int(np.prod(stacked.shape[1:], dtype=np.int64))
    sums = [grid_sum(clipped[:, j] if clipped.ndim > 1 else clipped, (lo, hi))
            for j in range(dims)]
    totals = np.array([s[0] for s in sums])
    per_coordinate = sums[0][2]  # replace-one sensitivity of one coordinate's block sum
    # the products are rounded up by a few ulp so the sensitivity is never under-stated
    if delta == 0.0:
        mechanism: Any = Laplace(epsilon, 0.0, dims * per_coordinate * (1.0 + 4 * _EPS))
    else:
        mechanism = Gaussian(epsilon, delta,
                             math.sqrt(dims) * per_coordinate * (1.0 + 4 * _EPS))
    ledger = Ledger(epsilon, delta) if ledger is None else ledger
    noisy = ledger.release(mechanism, totals if stacked.ndim > 1 else totals[0],
                           label=label or "sample and aggregate", rng=rng)
    value = np.clip(np.asarray(noisy) / k, lo, hi)
    return Result(value=float(value) if value.ndim == 0 else value, epsilon=epsilon,
                  delta=delta, clipped=n_clipped, query="sample_and_aggregate",
                  mechanism=repr(mechanism),
                  details={"blocks": k})  # not the empty blocks: they would reveal n
