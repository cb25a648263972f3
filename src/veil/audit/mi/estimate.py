"""What every mutual-information estimator returns, the input checks they share, and the
subsampling interval they report.

Mutual information is in nats throughout (``MIEstimate.bits`` converts).

Interval: a subsampling bootstrap (Politis & Romano 1994, half-sampling). Each replicate
re-runs the estimator on a random half of the rows drawn *without* replacement; for a
statistic that behaves like a mean, the spread of half-sample estimates around their mean
equals the spread of the full-sample estimator (the finite-population factor
``(n - n/2) / (n - 1) ~ 1/2`` cancels the doubled variance of a half sample), so
``value + quantiles(replicate - mean(replicates))`` is a percentile interval for the
full-sample value. Resampling *with* replacement is not used for the nearest-neighbour and
kernel estimators: duplicated rows sit at distance zero from each other and inflate the
estimate without bound. The interval covers sampling variability only, not the estimator's
bias, which each estimator documents in ``MIEstimate.bias``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from veil._validation import check_array, check_int, check_probability
from veil.errors import ConfigError, DataError
from veil.random import Generator

LOG2 = math.log(2.0)


@dataclass(frozen=True)
class MIEstimate:
    """A mutual-information estimate in nats with a ``confidence`` interval [lower, upper]."""

    value: float
    lower: float
    upper: float
    confidence: float
    method: str
    n: int
    bias: str

    @property
    def bits(self) -> float:
        """The estimate in bits."""
        return self.value / LOG2

    def to_dict(self) -> dict:
        return {"value_nats": self.value, "lower": self.lower, "upper": self.upper,
                "confidence": self.confidence, "method": self.method, "n": self.n,
                "bias": self.bias}


def as_columns(x, name: str) -> np.ndarray:
    """Continuous data as a finite float (n, d) array."""
    arr = check_array(x, name, ndim=(1, 2))
    return arr.reshape(-1, 1) if arr.ndim == 1 else arr


def as_codes(x, name: str) -> np.ndarray:
    """Discrete data (any dtype, one value or one row per sample) as integer codes 0..m-1."""
    arr = np.asarray(x)
    if arr.ndim not in (1, 2) or arr.shape[0] == 0:
        raise DataError(f"{name} has shape {arr.shape}; expected a non-empty (n,) or (n, d) "
                        "array of discrete values")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise DataError(f"{name} holds NaN or infinite values; discrete data must be finite")
    rows = arr.reshape(arr.shape[0], -1)
    try:
        _, codes = np.unique(rows, axis=0, return_inverse=True)
    except TypeError as exc:
        raise DataError(f"{name} mixes values that cannot be compared: {exc}") from None
    return codes.reshape(-1).astype(np.int64)


def check_pair(x: np.ndarray, y: np.ndarray, *, min_rows: int) -> int:
    """Both sides have the same number of rows, at least ``min_rows``."""
    if x.shape[0] != y.shape[0]:
        raise DataError(f"x has {x.shape[0]} rows and y has {y.shape[0]}; mutual information "
                        "needs paired samples (one row of x per row of y)")
    n = x.shape[0]
    if n < min_rows:
        raise DataError(f"{n} paired samples are too few for this estimator; need at least "
                        f"{min_rows}")
    return n


def check_not_constant(arr: np.ndarray, name: str) -> None:
    """A constant variable carries no information: MI with it is exactly 0, so there is
    nothing to estimate (and continuous estimators cannot standardise it)."""
    if arr.ndim == 1:
        if np.all(arr == arr[0]):
            raise DataError(f"{name} is constant (all {arr.shape[0]} values equal {arr[0]!r}): "
                            "its mutual information with anything is exactly 0; "
                            "nothing to estimate")
        return
    constant = np.flatnonzero(np.all(arr == arr[0], axis=0))
    if constant.size:
        raise DataError(f"{name} column(s) {constant.tolist()} are constant: they carry no "
                        "information; drop them before estimating mutual information")


def standardize(arr: np.ndarray) -> np.ndarray:
    """Each column to mean 0 and standard deviation 1 (MI is invariant to this)."""
    return (arr - arr.mean(axis=0)) / arr.std(axis=0)


def check_interval_options(bootstrap, confidence) -> tuple[int, float]:
    b = check_int(bootstrap, "bootstrap", low=0)
    if 0 < b < 20:
        raise ConfigError(f"bootstrap={bootstrap!r} is not allowed: use 0 (no interval) or at "
                          "least 20 replicates for a percentile interval")
    c = check_probability(confidence, "confidence", low_open=True, high_open=True)
    return b, c


def subsample_interval(statistic: Callable[[np.ndarray], float], n: int, value: float,
                       bootstrap: int, confidence: float, rng: Generator, *,
                       strata: np.ndarray | None = None) -> tuple[float, float]:
    """Half-sampling percentile interval around ``value`` (see the module docstring).

    ``statistic(rows)`` re-estimates on the given row indices; with ``strata`` (one code per
    row) each half takes half of every stratum, so no stratum runs short.
    """
    if bootstrap == 0:
        return math.nan, math.nan
    groups = [np.arange(n)] if strata is None else [np.flatnonzero(strata == s)
                                                   for s in np.unique(strata)]

    def half() -> np.ndarray:
        return np.concatenate([g[rng.permutation(g.size)[:g.size // 2]] for g in groups])

    reps = np.array([statistic(half()) for _ in range(bootstrap)])
    dev = reps - reps.mean()
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(dev, [tail, 1.0 - tail])
    return float(value + lo), float(value + hi)
