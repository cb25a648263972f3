"""k-ary randomized response and its unbiased frequency estimator.

Randomized response (Warner 1965), k-ary form (Kairouz, Oh & Viswanath 2016, "k-RR"):
each person reports their true category with probability ``e^eps / (e^eps + k - 1)`` and
each other category with probability ``1 / (e^eps + k - 1)``; the ratio of any report's
probabilities under two true values is at most e^eps, so it is epsilon-DP in the *local*
model (each report protects its sender, with no trusted curator).

veil samples it as dp_accounting's ``RandomizedResponseDpEvent`` describes it: keep the
true value with probability ``1 - p``, otherwise report a uniform category (possibly the
true one), with ``p = k / (e^eps + k - 1)``; the coin is exact (:func:`veil.dp.samplers
.bernoulli`) and ``p`` is rounded up, so the event is the mechanism exactly and its epsilon
``ln(1 + k (1 - p) / p)`` is at most the one asked for.

Frequency estimation: a category with true count ``n_j`` among ``n`` reports is reported
``c_j`` times with ``E[c_j] = n_j (1 - p) + n p / k``, so ``(c_j - n p / k) / (1 - p)`` is
unbiased (Wang, Blocki, Li & Jha 2017, "direct encoding").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from dp_accounting import dp_event as de

from veil._validation import check_epsilon, check_int
from veil.dp.mechanism import Mechanism
from veil.dp.samplers import bernoulli
from veil.errors import ConfigError, DataError
from veil.random import Generator

__all__ = ["RandomizedResponse"]


class RandomizedResponse(Mechanism):
    """k-ary randomized response over ``categories`` (an int k, or a list of k labels).

    Release one category or an array of them (one per person); get the reports back in
    the same form. :meth:`estimate` turns reports into unbiased counts.
    """

    def __init__(self, epsilon: float, categories: int | Sequence[Any]) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = 0.0
        if isinstance(categories, (int, np.integer)) and not isinstance(categories, bool):
            self.categories: list[Any] = list(range(check_int(categories, "categories",
                                                              low=2)))
        else:
            try:
                self.categories = list(categories)
            except TypeError:
                raise ConfigError(f"categories={categories!r} is not allowed: give an "
                                  "integer k >= 2 or a list of labels") from None
            if len(self.categories) < 2 or len(set(self.categories)) != len(self.categories):
                raise ConfigError(f"categories={categories!r} is not allowed: need at least "
                                  "2 distinct labels")
        self.k = len(self.categories)
        labels = np.asarray(self.categories)
        if labels.tolist() != self.categories:  # mixed types: keep the objects as given
            labels = np.empty(self.k, dtype=object)
            labels[:] = self.categories
        self._labels = labels
        self._index = {c: i for i, c in enumerate(self.categories)}
        p = self.k / (math.exp(self.epsilon) + self.k - 1) if self.epsilon < 700 else 0.0
        self.p = min(1.0, p * (1.0 + 2.0 ** -50))  # rounded up: never less noise than asked

    @property
    def event(self) -> de.DpEvent:
        return de.RandomizedResponseDpEvent(noise_parameter=self.p, num_buckets=self.k)

    @property
    def keep_probability(self) -> float:
        """Probability of reporting the true category: ``1 - p + p / k``."""
        return 1.0 - self.p + self.p / self.k

    def _codes(self, values: Any, name: str) -> tuple[np.ndarray, bool]:
        scalar = np.ndim(values) == 0
        flat = np.asarray(values, dtype=object).ravel()
        try:
            codes = np.fromiter((self._index[v] for v in flat), dtype=np.int64,
                                count=flat.size)
        except (KeyError, TypeError):
            unknown = sorted({repr(v) for v in flat if v not in self._index})[:5]
            raise DataError(f"{name} holds values outside the declared categories: "
                            f"{', '.join(unknown)}") from None
        return codes, scalar

    def check(self, value: Any) -> np.ndarray:
        """The category codes of ``value`` (DataError for an undeclared category)."""
        return self._codes(value, "value")[0]

    def _randomize(self, value: Any, rng: Generator) -> Any:
        codes, scalar = self._codes(value, "value")
        noisy = bernoulli(self.p, codes.size, rng)
        codes[noisy] = rng.integers(0, self.k, int(noisy.sum()))
        labels = self._labels[codes]
        if scalar:
            return labels[0]
        return labels.reshape(np.shape(value)) if np.ndim(value) > 1 else labels

    def estimate(self, reports: Any) -> np.ndarray:
        """Unbiased estimates of the true count of each category (post-processing)."""
        codes, _ = self._codes(reports, "reports")
        counts = np.bincount(codes, minlength=self.k).astype(np.float64)
        if self.p >= 1.0:
            raise ConfigError("the reports carry no information (p = 1): cannot estimate")
        return (counts - codes.size * self.p / self.k) / (1.0 - self.p)

    def __repr__(self) -> str:
        return f"RandomizedResponse(epsilon={self.epsilon:g}, k={self.k}, p={self.p:.6g})"
