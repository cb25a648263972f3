"""Parameter and data checks shared by every module.

Each check returns the normalised value or raises :class:`~veil.errors.ConfigError`
(parameters) / :class:`~veil.errors.DataError` (data) with a message that names the
parameter, the value given and what is allowed. Call them at the boundary, before any
state changes, noise is drawn or budget is spent.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from veil.errors import ConfigError, DataError


def _as_real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{name}={value!r} is not allowed: expected a real number")
    return float(value)


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    """A privacy parameter epsilon: finite and > 0."""
    v = _as_real(value, name)
    if not (v > 0 and math.isfinite(v)):
        raise ConfigError(f"{name}={value!r} is not allowed: must be finite and > 0")
    return v


def check_delta(value: Any, name: str = "delta") -> float:
    """A privacy parameter delta in [0, 1)."""
    v = _as_real(value, name)
    if not (0.0 <= v < 1.0):
        raise ConfigError(f"{name}={value!r} is not allowed: must be in [0, 1)")
    return v


def check_positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """A finite real > 0 (or >= 0 with ``allow_zero``)."""
    v = _as_real(value, name)
    ok = (v >= 0 if allow_zero else v > 0) and math.isfinite(v)
    if not ok:
        allowed = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name}={value!r} is not allowed: must be finite and {allowed}")
    return v


def check_probability(value: Any, name: str, *, low_open: bool = False,
                      high_open: bool = False) -> float:
    """A real in [0, 1]; ``low_open``/``high_open`` exclude 0 or 1."""
    v = _as_real(value, name)
    lo_ok = v > 0 if low_open else v >= 0
    hi_ok = v < 1 if high_open else v <= 1
    if not (lo_ok and hi_ok):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ConfigError(f"{name}={value!r} is not allowed: must be in {interval}")
    return v


def check_int(value: Any, name: str, *, low: int | None = None,
              high: int | None = None) -> int:
    """An integer in [low, high] (either end optional)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name}={value!r} is not allowed: expected an integer")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ConfigError(f"{name}={value!r} is not allowed: must be an integer in [{lo}, {hi}]")
    return v


def check_choice(value: Any, name: str, allowed: Iterable[Any]) -> Any:
    """One of a fixed set of options."""
    options = list(allowed)
    if value not in options:
        raise ConfigError(
            f"{name}={value!r} is not allowed: choose one of {', '.join(map(repr, options))}")
    return value

def check_bounds(bounds: Any, name: str = "bounds") -> tuple[float, float]:
    """Declared data bounds ``(lower, upper)``: finite, lower < upper, and a finite width
    ``upper - lower`` (every bounded statistic's sensitivity is a multiple of it)."""
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name}={bounds!r} is not allowed: expected a pair (lower, upper)") from None
    lo = _as_real(lo, f"{name}[0]")
    hi = _as_real(hi, f"{name}[1]")
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(
            f"{name}={bounds!r} is not allowed: need finite lower < upper")
    if not math.isfinite(hi - lo):
        raise ConfigError(f"{name}={bounds!r} is not allowed: the width upper - lower "
                          "overflows a float")
    return lo, hi


def check_array(x: Any, name: str = "x", *, ndim: int | tuple[int, ...] | None = None,
                dtype: Any = np.float64, allow_empty: bool = False) -> np.ndarray:
    """Data as a finite numpy array (NaN/inf and non-numeric values are a DataError).

    The messages carry scikit-learn's wording where its estimator checks look for it
    (sparse input, complex data, "Reshape your data", "0 feature(s)")."""
    if hasattr(x, "tocsr") or hasattr(x, "sparse"):   # scipy.sparse / pandas sparse
        raise DataError(f"{name} is a sparse matrix: sparse input is not supported; pass a "
                        "dense array")
    try:
        arr = np.asarray(x)
        if arr.dtype.kind == "c":
            raise DataError(f"{name} holds complex numbers: Complex data not supported")
        arr = arr.astype(dtype, copy=False) if dtype is not None else arr
    except (TypeError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{name} is not numeric data: {exc}") from None
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if arr.ndim not in allowed:
            hint = (": Reshape your data with x.reshape(-1, 1) for one feature or "
                    "x.reshape(1, -1) for one sample") if allowed == (2,) else ""
            raise DataError(f"{name} has {arr.ndim} dimensions (shape {arr.shape}); "
                            f"expected {' or '.join(map(str, allowed))}{hint}")
    if not allow_empty and arr.size == 0:
        if arr.ndim == 2 and arr.shape[1] == 0:
            raise DataError(f"{name} has 0 feature(s) (shape={arr.shape}) while a minimum of "
                            "1 is required.")
        raise DataError(f"{name} is empty; expected at least one value")
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise DataError(f"{name} holds {bad} NaN or infinite value(s); clean or impute them first")
    return arr


def check_xy(X: Any, y: Any, *, name: str = "X") -> tuple[np.ndarray, np.ndarray]:
    """Training data: X a finite 2-d array, y one label or target per row of X."""
    X = check_array(X, name, ndim=2)
    if y is None:
        raise DataError("y=None is not allowed: this estimator requires y to be passed, but "
                        "the target y is None")
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise DataError(f"y has shape {y.shape}; expected ({X.shape[0]},) to match {name}")
    return X, y


def check_categories(categories: Any, name: str = "categories") -> tuple[Any, ...]:
    """Declared categories (a histogram's public label set): a non-empty sequence of
    distinct values, as a tuple."""
    cats = tuple(categories)
    if not cats or len(set(cats)) != len(cats):
        raise ConfigError(f"{name}={categories!r} is not allowed: need distinct categories")
    return cats


def check_pair(pair: Any, name: str, *, dtype: Any = np.float64,
               allow_empty: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``pair`` as training data ``(X, y)``: X a finite 2-d array (:func:`check_array`,
    with ``dtype`` and ``allow_empty``), y one label per row of X. DataError naming
    ``name`` (``clients[3]``, ``members``) when it is not a pair or the shapes disagree."""
    try:
        X, y = pair
    except (TypeError, ValueError):
        raise DataError(f"{name} is not an (X, y) pair of features and labels") from None
    X = check_array(X, f"{name}[0]", ndim=2, dtype=dtype, allow_empty=allow_empty)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise DataError(f"{name}[1] has shape {y.shape}; expected ({X.shape[0]},): one label "
                        "per row of X")
    return X, y


def check_fitted(estimator: Any, attribute: str) -> None:
    """ConfigError unless ``estimator`` has the learned ``attribute`` (it was fitted)."""
    if not hasattr(estimator, attribute):
        raise ConfigError(f"this {type(estimator).__name__} is not fitted: call fit first")


def check_features(X: Any, n_features: int, name: str = "X", *,
                   owner: Any = None) -> np.ndarray:
    """A finite 2-d array with the ``n_features`` columns a fitted model (``owner``)
    expects."""
    arr = check_array(X, name, ndim=2)
    if arr.shape[1] != n_features:
        model = "the model" if owner is None else type(owner).__name__
        raise DataError(f"{name} has {arr.shape[1]} features, but {model} is expecting "
                        f"{n_features} features as input")
    return arr
