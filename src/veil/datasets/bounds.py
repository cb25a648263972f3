"""Declared public feature bounds, and the scaling they give.

Gradient learners need features on a common, known scale: plain gradient descent on raw
breast-cancer features (areas in the thousands beside smoothness in hundredths) trains a
constant model, and a DP learner's clipping and a hybrid party's fixed-point grid assume
bounded inputs. Fitting a scaler to the records would make the scale (and so the model)
depend on private data, so veil scales from bounds **declared before the data is seen**: a
configuration's ``[data] bounds``, or the ranges documented with a known data set
(:func:`public_bounds`). Feature j with declared bounds ``[l_j, h_j]`` maps to

    x_j  ->  2 (clip(x_j, l_j, h_j) - l_j) / (h_j - l_j) - 1   in [-1, 1]:

the declared range's centre goes to 0, where a zero-initialised linear model starts, so
its first gradient steps move the weights rather than only the intercept (on breast cancer,
a 4-round hybrid run reaches 0.71 against 0.63 for the same map into [0, 1]). A saved model
records it as a ``"bounds"`` encoding step (:func:`veil.learn.model_format.encode_table`), so
``veil predict`` applies it to new raw tables. Every party applies it to its own records
alone (an element-wise map: scaling before or after partitioning gives the same rows).

A value outside its bounds is clipped into them and the number clipped per feature is
logged (the party's own log, about its own records). A value further outside than
``tolerance`` times the feature's width is refused with a :class:`~veil.errors.ConfigError`
naming the feature: such bounds do not describe the table (another unit, or raw values
against bounds of encoded ones), and clipping would silently flatten the feature. The
message names the feature and its bounds, never the private value.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from veil._validation import check_array, check_bounds, check_positive
from veil.datasets.tabular import load_sklearn
from veil.errors import ConfigError

__all__ = ["FeatureBounds", "public_bounds", "DEFAULT_TOLERANCE"]

logger = logging.getLogger(__name__)

#: how far outside its bounds (in widths) a value may lie and still be clipped
DEFAULT_TOLERANCE = 0.5

# The ranges documented with the data sets (scikit-learn's DESCR tables, from UCI's
# wdbc.names and wine.names), rounded outward to a tenth of the range's leading decade
# (a lower bound of 0 kept: those quantities are non-negative), so the table's own rounding
# leaves every published record inside. Order: scikit-learn's feature order.
_BREAST_CANCER = (
    (6, 29), (9, 40), (40, 190), (100, 2600), (0.05, 0.17), (0.01, 0.35), (0, 0.43),
    (0, 0.21), (0.1, 0.31), (0.049, 0.098),                                       # mean
    (0.1, 2.9), (0.3, 4.9), (0, 22), (0, 550), (0.001, 0.032), (0, 0.14), (0, 0.4),
    (0, 0.054), (0.007, 0.08), (0, 0.031),                                        # error
    (7, 37), (12, 50), (50, 260), (100, 4300), (0.07, 0.23), (0, 1.1), (0, 1.3), (0, 0.3),
    (0.15, 0.67), (0.05, 0.21))                                                   # worst
_WINE = ((10.9, 14.9), (0.7, 5.9), (1.3, 3.3), (10, 31), (69, 163), (0.9, 3.9), (0.3, 5.1),
         (0.12, 0.67), (0.4, 3.6), (1, 14), (0.4, 1.8), (1.2, 4.1), (200, 1700))
_PUBLIC: dict[str, tuple[tuple[float, float], ...]] = {
    "breast_cancer": _BREAST_CANCER, "wine": _WINE,
    "digits": ((0, 16),) * 64,   # pixel intensities 0..16, as published
}


class FeatureBounds:
    """Declared ``[low, high]`` per feature (public: never read from the records), and
    :meth:`scale`, which maps a table's features into [-1, 1] (module docstring).

    ``names``: the features' names (default ``x0, x1, ...``), used in messages and in
    :meth:`encoding`; ``tolerance``: how far outside its bounds, in widths, a value may lie
    and still be clipped rather than refused.
    """

    def __init__(self, bounds: Sequence[Any], *, names: Sequence[str] | None = None,
                 tolerance: float = DEFAULT_TOLERANCE, where: str = "bounds") -> None:
        if isinstance(bounds, (str, bytes)) or not isinstance(bounds, Sequence) or not bounds:
            raise ConfigError(f"{where}={bounds!r} is not allowed: expected one [low, high] "
                              "pair per feature")
        pairs = [check_bounds(b, f"{where}[{j}]") for j, b in enumerate(bounds)]
        self.low = np.array([lo for lo, _ in pairs])
        self.high = np.array([hi for _, hi in pairs])
        if names is None:
            names = [f"x{j}" for j in range(len(pairs))]
        if len(names) != len(pairs):
            raise ConfigError(f"{where} has {len(pairs)} [low, high] pairs for {len(names)} "
                              "named features; give one pair per feature")
        self.names = [str(n) for n in names]
        self.tolerance = check_positive(tolerance, "tolerance", allow_zero=True)
        self.where = where

    def __len__(self) -> int:
        return len(self.names)

    def scale(self, X: Any, name: str = "X") -> np.ndarray:
        """``X`` (n, d) mapped into [-1, 1] by the bounds; values outside are clipped (a
        logged count per feature), values more than ``tolerance`` widths outside refused."""
        X = check_array(X, name, ndim=2)
        if X.shape[1] != len(self):
            raise ConfigError(f"{self.where} declares {len(self)} features but {name} has "
                              f"{X.shape[1]}; give one [low, high] pair per column")
        width = self.high - self.low
        # distance outside the bounds, in widths (0 inside)
        outside = np.maximum(self.low - X, X - self.high) / width
        far = np.flatnonzero((outside > self.tolerance).any(axis=0))
        if far.size:
            j = int(far[0])
            others = f" (and {far.size - 1} other feature(s))" if far.size > 1 else ""
            raise ConfigError(
                f"{self.where}: feature {self.names[j]!r}{others} has values more than "
                f"{self.tolerance:g} x its width outside its declared bounds "
                f"[{self.low[j]:g}, {self.high[j]:g}] in {name}: the bounds do not describe "
                "these records (another unit, or an encoded table's bounds for raw values?)")
        clipped = (outside > 0).sum(axis=0)
        if clipped.any():
            logger.warning("%s: values outside the declared bounds clipped into them: %s",
                           name, ", ".join(f"{self.names[j]!r}: {int(clipped[j])}"
                                           for j in np.flatnonzero(clipped)))
        return 2.0 * (np.clip(X, self.low, self.high) - self.low) / width - 1.0

    def encoding(self) -> list[dict[str, Any]]:
        """The map as a saved model's encoding steps (:mod:`veil.learn.model_format`)."""
        return [{"column": n, "kind": "bounds", "low": float(lo), "high": float(hi)}
                for n, lo, hi in zip(self.names, self.low, self.high)]


def public_bounds(name: str) -> FeatureBounds | None:
    """The documented bounds of the raw features of :func:`veil.datasets.load_xy` ``(name)``
    (``breast_cancer``, ``wine``, ``digits``); None for a set whose encoding already puts
    every feature in [0, 1] from public ranges and categories (``adult``, ``nursery``: a
    one-hot column keeps 0 for "not this category")."""
    if name in ("adult", "nursery"):
        return None
    if name not in _PUBLIC:
        raise ConfigError(f"name={name!r} is not allowed: public feature bounds are known for "
                          f"{', '.join(sorted(_PUBLIC))} (adult and nursery need none); "
                          "declare others, one [low, high] pair per feature")
    return FeatureBounds(_PUBLIC[name], names=load_sklearn(name).feature_names,
                         where=f"public_bounds({name!r})")
